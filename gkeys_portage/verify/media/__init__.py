"""Release media (stage3, LiveCD/ISO): DIGESTS, .asc, .sha256 and latest-*.txt; download and hashing."""
