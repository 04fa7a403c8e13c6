"""A key's history (``store``) and the time rule that judges each signature by it (``timerule``): issue 41."""
