"""The ebuild tree over git: commit signatures, the git reader, work-tree checks, failure markers."""
