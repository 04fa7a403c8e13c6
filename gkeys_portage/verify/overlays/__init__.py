"""The overlay list (repositories.xml): signature, safe parsing, format rules, safe source URLs."""
