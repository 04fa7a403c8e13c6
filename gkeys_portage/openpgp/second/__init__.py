"""The second opinion's processes beside gkeys' own (:mod:`.worker`)."""
