"""The one door to GnuPG and what gpg says: running gpg, verifying, key import/export, packets, status and
colon output, the verdict."""
