"""DIGESTS / latest-*.txt parsers on recorded-style text, and the read-once fan-out (no gpg)."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import pytest

from gkeys_portage.core.errors import BadInputError
from gkeys_portage.verify.media import fanout
from gkeys_portage.verify.media.digests import (
    WrongProductError,
    hashlib_name,
    latest_timestamp,
    newest,
    newest_of_product,
    parse_digests,
    parse_latest,
    product_build,
)

NAME = "stage3-amd64-openrc-20240107T170309Z.tar.xz"
H512 = "a" * 128
B2 = "b" * 128

# The current form (sections in any order, the file and its CONTENTS.gz), as catalyst writes it.
CURRENT = f"""# BLAKE2B HASH
{B2}  {NAME}
# SHA512 HASH
{H512}  {NAME}
# BLAKE2B HASH
{"c" * 128}  {NAME}.CONTENTS.gz
# SHA512 HASH
{"d" * 128}  {NAME}.CONTENTS.gz
"""

# An older form: MD5, SHA1, WHIRLPOOL sections, SHA512 first.
OLDER = f"""# SHA512 HASH
{H512}  {NAME}
# MD5 HASH
{"1" * 32}  {NAME}
# SHA1 HASH
{"2" * 40}  {NAME}
# WHIRLPOOL HASH
{"3" * 128}  {NAME}
"""


def test_current_form_sections_in_any_order() -> None:
    parsed = parse_digests(CURRENT)
    assert parsed.for_file(NAME) == {"BLAKE2B": B2, "SHA512": H512}
    assert parsed.for_file(NAME + ".CONTENTS.gz")["SHA512"] == "d" * 128
    assert parsed.filenames() == [NAME, NAME + ".CONTENTS.gz"]


def test_older_form_and_stream_input() -> None:
    parsed = parse_digests(io.StringIO(OLDER))
    assert parsed.algorithms() == ["SHA512", "MD5", "SHA1", "WHIRLPOOL"]
    assert parsed.for_file(NAME)["MD5"] == "1" * 32


def test_bsd_style_binary_marker_and_build_paths() -> None:
    text = (f"SHA512 (builds/default/{NAME}) = {H512.upper()}\n"
            f"BLAKE2b ({NAME}) = {B2}\n# SHA256 HASH\n{'e' * 64} *{NAME}\n")
    parsed = parse_digests(text)
    assert parsed.for_file(NAME) == {"SHA512": H512, "BLAKE2B": B2, "SHA256": "e" * 64}
    assert parsed.entries[0].written == f"builds/default/{NAME}"


def test_full_build_paths_and_tool_named_headers() -> None:
    # As a catalyst with absolute build paths writes it (pentoo-livecd#48).
    iso = "pentoo-full-amd64-hardened-2023.0_p20230527.iso"
    text = (f"# BLAKE2 (b2sum) HASH\n{B2}  /catalyst/release/Pentoo_Full_amd64_hardened/{iso}\n"
            f"# SHA512 HASH\n{H512}  /catalyst/release/Pentoo_Full_amd64_hardened/{iso}\n"
            f"# BLAKE2 (b2sum) HASH\n{'c' * 128}  /catalyst/release/Pentoo_Full_amd64_hardened/{iso}.CONTENTS\n")
    parsed = parse_digests(text)
    assert parsed.for_file(iso) == {"BLAKE2B": B2, "SHA512": H512}
    assert parsed.for_file(iso + ".CONTENTS") == {"BLAKE2B": "c" * 128}
    assert all(entry.absolute for entry in parsed.entries)


def test_identical_duplicates_are_fine_conflicting_ones_are_not() -> None:
    assert parse_digests(f"# SHA512 HASH\n{H512}  {NAME}\n# SHA512 HASH\n{H512}  {NAME}\n").for_file(NAME)
    with pytest.raises(BadInputError, match="conflicting SHA512 entries"):
        parse_digests(f"# SHA512 HASH\n{H512}  {NAME}\n# SHA512 HASH\n{'f' * 128}  {NAME}\n")


@pytest.mark.parametrize(("text", "message"), [
    (f"{H512}  {NAME}\n", "before any"),
    (f"# SHA512 HASH\n{'a' * 127}  {NAME}\n", "hex digits"),
    (f"# SHA512 HASH\nnot a hash line {NAME}\n", "not a digest line"),
    (f"# SHA512 HASH\n{H512}  ../{NAME}\n", "path traversal"),
    (f"SHA512 (../../etc/{NAME}) = {H512}\n", "path traversal"),
    (f"# SHA512 HASH\n{H512}  builds/\n", "directory"),
    ("# just a comment\n\n", "no digest entries"),
])
def test_bad_digests(text: str, message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        parse_digests(text)


def test_unknown_algorithm_is_parsed_but_not_computable() -> None:
    parsed = parse_digests(f"# FANCY512 HASH\n{'ab' * 40}  {NAME}\n# SHA512 HASH\n{H512}  {NAME}\n")
    assert set(parsed.for_file(NAME)) == {"FANCY512", "SHA512"}
    assert hashlib_name("FANCY512") is None and hashlib_name("SHA512") == "sha512"


LATEST = """# Latest as of Sun, 07 Jan 2024 17:40:02 +0000
# ts=1704649202
20240107T170309Z/stage3-amd64-openrc-20240107T170309Z.tar.xz 267458912
"""


def test_latest_file() -> None:
    entries = parse_latest(LATEST)
    assert len(entries) == 1
    entry = newest(entries)
    assert (entry.path, entry.size, entry.stamp) == ("20240107T170309Z/" + NAME, 267458912, "20240107T170309Z")
    assert entry.filename == NAME
    assert latest_timestamp(LATEST) == 1704649202 and latest_timestamp("# Latest\n") is None


def test_latest_picks_the_newest_stamp() -> None:
    text = ("20240201T000000Z/stage3-amd64-openrc-20240201T000000Z.tar.xz 3\n"
            "20231201T000000Z/stage3-amd64-openrc-20231201T000000Z.tar.xz 1\n"
            "20240101T000000Z/stage3-amd64-openrc-20240101T000000Z.tar.xz 2\n")
    assert newest(parse_latest(io.StringIO(text))).size == 3


@pytest.mark.parametrize("line", [
    "../../../etc/passwd 10",
    "20240107T170309Z/../../x.tar.xz 10",
    "/releases/amd64/autobuilds/x.tar.xz 10",
    "http://evil.example/stage3.tar.xz 10",
    "//evil.example/stage3.tar.xz 10",
    "20240107T170309Z//x.tar.xz 10",
    "20240107T170309Z/x.tar.xz ten",
    "20240107T170309Z/x.tar.xz 10 extra",
])
def test_latest_refuses_paths_outside_the_mirror_and_garbage(line: str) -> None:
    with pytest.raises(BadInputError):
        parse_latest(f"# Latest\n{line}\n")


def test_read_once_matches_hashlib_across_chunk_boundaries(tmp_path: Path) -> None:
    data = bytes(range(256)) * (fanout.CHUNK // 256 * 3 + 17)  # three chunks and a bit
    path = tmp_path / "big"
    path.write_bytes(data)
    seen = bytearray()

    def collect(stream: fanout.ChunkStream) -> int:
        while piece := stream.read(65536):
            seen.extend(piece)
        return len(seen)

    done: list[tuple[int, int]] = []
    digests, count = fanout.read_once(path, ["sha512", "blake2b", "sha256"], collect, lambda d, t: done.append((d, t)))
    assert digests == {name: hashlib.new(name, data).hexdigest() for name in ("sha512", "blake2b", "sha256")}
    assert count == len(data) and bytes(seen) == data
    assert done[-1] == (len(data) >> 20, len(data) >> 20)


def test_read_once_reraises_a_consumer_failure_without_deadlock(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * (fanout.CHUNK * (fanout.QUEUE_DEPTH + 4)))

    def stops_early(stream: fanout.ChunkStream) -> None:
        stream.read(10)
        raise BadInputError("consumer gave up")

    with pytest.raises(BadInputError, match="consumer gave up"):
        fanout.read_once(path, ["sha512"], stops_early)


@pytest.mark.parametrize("cpus", [1, 2, 5])
def test_hash_held_matches_hashlib_whatever_the_number_of_threads(tmp_path: Path, cpus: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The digests of a held file, spread over 1, 2 or 3 threads (one per spare CPU, at most one per digest),
    each reading with its own pread from offset 0 whatever the descriptor's offset."""
    data = bytes(range(256)) * (fanout.CHUNK // 256 * 3 + 17)
    path = tmp_path / "big"
    path.write_bytes(data)
    monkeypatch.setattr(fanout, "spare_cpus", lambda: cpus)
    names = ["sha512", "blake2b", "sha256"]
    done: list[tuple[int, int]] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, 12345, os.SEEK_SET)
        digests = fanout.hash_held(fd, path, names, lambda d, t: done.append((d, t)))
        assert fanout.hash_held(fd, path, []) == {}  # nothing listed: nothing read
    finally:
        os.close(fd)
    assert digests == {name: hashlib.new(name, data).hexdigest() for name in names}
    assert done[-1] == (len(data) >> 20, len(data) >> 20)


def test_hash_held_turns_a_read_error_into_bad_input(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)  # a directory: pread fails with EISDIR
    try:
        with pytest.raises(BadInputError, match=f"cannot read {tmp_path}"):
            fanout.hash_held(fd, tmp_path, ["sha512"])
    finally:
        os.close(fd)


PRODUCT = "stage3-amd64-hardened-openrc"


@pytest.mark.parametrize(("path", "build"), [
    (f"20261201T170321Z/{PRODUCT}-20261201T170321Z.tar.xz", "20261201T170321Z"),
    (f"{PRODUCT}-20200101.tar.bz2", "20200101T000000Z"),
    (f"20261201T170321Z/{PRODUCT}-20261201T170321Z.iso", "20261201T170321Z"),
    ("20200101T000000Z/stage3-i686-musl-20200101T000000Z.tar.xz", None),  # another product
    (f"20261201T170321Z/{PRODUCT}-splitusr-20261201T170321Z.tar.xz", None),  # a longer product name
    (f"20261201T170321Z/{PRODUCT}-20261201T170321Z.tar.xz.asc", None),  # a sibling, not the file
    (f"20261201T170321Z/{PRODUCT}-20261201T170321Z.tar.xz.DIGESTS", None),
    (f"20261201T170321Z/{PRODUCT}-20261201T170321Z", None),  # no extension
    (f"20270101T000000Z/{PRODUCT}-20261201T170321Z.tar.xz", None),  # directory and name disagree
    (f"20261201T170321Z/x{PRODUCT}-20261201T170321Z.tar.xz", None),
])
def test_product_build_requires_name_stamp_ext_exactly(path: str, build: str | None) -> None:
    """Issue 11 item 5: a latest-NAME.txt entry counts only if its file is NAME-<stamp>.<ext> exactly."""
    entry = parse_latest(f"{path} 10\n")[0]
    assert product_build(entry, PRODUCT) == build


def test_newest_of_product_never_chooses_another_product() -> None:
    text = (f"20261201T170321Z/{PRODUCT}-20261201T170321Z.tar.xz 1\n"
            "20271201T000000Z/stage3-i686-musl-20271201T000000Z.tar.xz 2\n"
            f"20261101T170321Z/{PRODUCT}-20261101T170321Z.tar.xz 3\n")
    entry, build = newest_of_product(parse_latest(text), PRODUCT)
    assert (entry.size, build) == (1, "20261201T170321Z")
    with pytest.raises(WrongProductError, match="lists no stage3-amd64-hardened-openrc-<stamp> file"):
        newest_of_product(parse_latest("20200101T000000Z/stage3-i686-musl-20200101T000000Z.tar.xz 2\n"), PRODUCT)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x0c", "\x0b", "\x1e", "\x00"])
def test_lines_split_at_lf_only_and_odd_separators_make_a_name_unusable(separator: str) -> None:
    """sha512sum/b2sum split at LF only; str.splitlines() also split at these, so "hash  NAME<sep># x" was
    read as an entry for NAME plus a comment.  Now the whole name is kept, and refused."""
    with pytest.raises(BadInputError, match="unusable file name"):
        parse_digests(f"# SHA512 HASH\n{H512}  {NAME}{separator}# x\n")


def test_crlf_lines_and_trailing_blanks_still_parse() -> None:
    parsed = parse_digests(f"# SHA512 HASH \r\n{H512}  {NAME} \t\r\n\r\n")
    assert parsed.for_file(NAME) == {"SHA512": H512}
    assert parse_latest(f"# ts=1\r\n20240107T170309Z/{NAME} 10\r\n")[0].size == 10


def test_a_huge_name_gives_a_short_error() -> None:
    with pytest.raises(BadInputError) as caught:
        parse_digests(f"# SHA512 HASH\n{H512}  ../{'x' * 3_000_000}\n")
    assert len(caught.value.message) < 200
