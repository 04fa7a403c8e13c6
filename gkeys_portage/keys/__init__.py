"""Seeds and keys: seed files (format, signer binding, fetching), keyrings, key sources, install, refresh,
authority (GLEP 79), bundles, publishing, LDAP seeds, and the context (:class:`~gkeys_portage.keys.context.Gkeys`)."""
