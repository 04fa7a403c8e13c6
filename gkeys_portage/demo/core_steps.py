"""The demo's core scenes: seeds, keys and generic verification."""

from __future__ import annotations

import functools

from gkeys_portage.demo.scene import DemoWorld, Step, serve_as


def steps(world: DemoWorld) -> list[Step]:
    """Seeds, keys and generic verification."""
    keys, server, work = world.keys, world.server, world.workdir
    world.publish_seeds("gentoo", ["gkeys", "releng"])
    world.publish_seeds("gentoo-devs", ["alice", "bob"])
    # The keyserver answers alice's fingerprint with alice's key *and* mallory's (a substitution try).
    server.hkp[keys.keys["alice"].fingerprint] = keys.public("alice") + b"\n" + keys.public("mallory")
    server.hkp[keys.keys["releng"].fingerprint] = keys.public("releng")
    server.publish_wkd(keys.keys["bob"].email, keys.public("bob", armor=False))
    server.publish_wkd(keys.keys["gkeys"].email, keys.public("gkeys", armor=False), method="direct")
    (work / "gkeys.asc").write_bytes(keys.public("gkeys"))

    files = work / "files"
    files.mkdir()
    good = files / "announcement.txt"
    good.write_text("Gentoo demo: this file is signed by alice.\n")
    (files / "announcement.txt.asc").write_bytes(keys.sign("alice", good))
    tampered = files / "tampered.txt"
    tampered.write_text("Gentoo demo: this file is signed by alice.\n")
    (files / "tampered.txt.asc").write_bytes(keys.sign("alice", tampered))
    tampered.write_text("Gentoo demo: this file was changed after alice signed it.\n")
    forged = files / "mallory.txt"
    forged.write_text("Trust me, I am a Gentoo developer.\n")
    (files / "mallory.txt.asc").write_bytes(keys.sign("mallory", forged))
    releng_note = files / "release-note.txt"
    releng_note.write_text("Release note, clearsigned by releng.\n")
    (files / "release-note.txt.asc").write_bytes(keys.sign("releng", releng_note, clearsign=True))

    gkeys_fpr = keys.keys["gkeys"].fingerprint
    return [
        Step("bootstrap the root of trust by hand: the seed-signing key's fingerprint",
             world.gkeys("add-seed", "-C", "seed-signers", "-n", "gkeys", "-N", "Demo Gentoo-keys", "-K", gkeys_fpr)),
        Step("import its key from a file: accepted only because the fingerprint matches",
             world.gkeys("import-key", "-C", "seed-signers", "-n", "gkeys", "-F", str(work / "gkeys.asc"))),
        Step("fetch the signed release seed file (signature pinned to seed-signers/gkeys)",
             world.gkeys("fetch-seed", "-C", "gentoo")),
        Step("install the release keys (WKD first, then the keyserver)",
             world.gkeys("install-key", "-C", "gentoo")),
        Step("update the developer seeds and keys; mallory's key offered by the keyserver is dropped",
             world.gkeys("update-seed", "-C", "gentoo-devs")),
        Step("REFUSED: the developers' seed file served at the release seed URL (signed for gentoo-devs)",
             world.gkeys("update-seed", "-C", "gentoo"), expect=1, prepare=functools.partial(
                 serve_as, server, "seeds/gentoo-devs.seeds", "seeds/gentoo.seeds", (".sig",))),
        Step("list the developer keys", world.gkeys("list-key", "-C", "gentoo-devs")),
        Step("verify a file alice signed", world.gkeys("verify", "-F", str(good), "-C", "gentoo-devs")),
        Step("verify a clearsigned release note", world.gkeys("verify", "-F", str(files / "release-note.txt.asc"),
                                                              "-C", "gentoo")),
        Step("REFUSED: the file was changed after signing", world.gkeys("verify", "-F", str(tampered)), expect=1),
        Step("REFUSED: signed by mallory, whom no seed pins", world.gkeys("verify", "-F", str(forged)), expect=1),
        Step("REFUSED: alice's signature is not good enough when only bob is accepted",
             world.gkeys("verify", "-F", str(good), "-C", "gentoo-devs", "-n", "bob"), expect=1),
    ]
