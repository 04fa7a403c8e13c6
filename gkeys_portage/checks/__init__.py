"""Key checks: GLEP 63 compliance, GLEP 63 key generation, expiry reminders."""
