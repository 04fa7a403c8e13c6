"""File-system operations root performs on trees beside a repository: descriptor walks, swaps, the trash."""
