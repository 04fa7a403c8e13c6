"""The offline demo (``gkeys demo``) and the throwaway OpenPGP world it shares with the tests."""
