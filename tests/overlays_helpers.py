"""Building overlay lists (repositories.xml) for the overlay tests."""

from __future__ import annotations

HEADER = '<?xml version="1.0" encoding="UTF-8"?>\n<repositories xmlns="" version="1.0">\n'
FOOTER = "</repositories>\n"


def repo(name: str = "good-overlay", *, sources: tuple[tuple[str, str], ...] = (
        ("git", "https://github.com/example/good-overlay.git"),), quality: str = "experimental",
         status: str = "unofficial", extra: str = "") -> str:
    """One <repo> element (7 lines plus one per source), well-formed and valid unless told otherwise."""
    body = "".join(f'    <source type="{kind}">{url}</source>\n' for kind, url in sources)
    return (f'  <repo quality="{quality}" status="{status}">\n'
            f"    <name>{name}</name>\n"
            f'    <description lang="en">The {name} overlay</description>\n'
            f"    <homepage>https://example.org/{name}</homepage>\n"
            f'    <owner type="person">\n      <email>{name}@example.org</email>\n    </owner>\n'
            f"{body}{extra}  </repo>\n")


def overlay_list(*repos: str, header: str = HEADER) -> bytes:
    """A complete list of the given <repo> elements (a good one if none is given)."""
    return (header + "".join(repos or (repo(),)) + FOOTER).encode("utf-8")


GOOD = overlay_list(repo("alpha"), repo("beta", sources=(("git", "git@github.com:example/beta.git"),
                                                         ("mercurial", "https://hg.example.org/beta"))),
                    repo("gamma", sources=(("rsync", "rsync://rsync.example.org/gamma"),), status="official"))

#: gkeys.conf lines that make the tests' signer ``gentoo-infra/infra`` the overlay-list key, in the category the
#: overlay tests verify with (a nick named there must be a seed of the category: the config is checked on load).
PURPOSES = "[purposes]\noverlay-list = gentoo-infra/infra\n"


def overlays_config(overlays: str = "", *, category: str = "gentoo-infra", signers: str = "infra") -> str:
    """``[purposes]`` naming ``gentoo-infra/NICK`` for each of ``signers`` as overlay-list keys, and an
    ``[overlays]`` section with ``category`` and ``overlays``."""
    keys = " ".join(f"gentoo-infra/{nick}" for nick in signers.split())
    return f"[purposes]\noverlay-list = {keys}\n[overlays]\ncategory = {category}\n{overlays}"
