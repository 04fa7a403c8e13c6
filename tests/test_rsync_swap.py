"""core/fs/swap.py: the one-step exchange of two trees, and the recovery of an interrupted two-rename fallback."""

from __future__ import annotations

from pathlib import Path

from gkeys_portage.core.fs.swap import exchange, previous_path, recover, swap_in


def _tree(path: Path, word: str) -> Path:
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "file").write_text(word)
    return path


def test_exchange_swaps_two_directories(tmp_path: Path) -> None:
    a, b = _tree(tmp_path / "a", "A"), _tree(tmp_path / "b", "B")
    exchange(a, b)
    assert (a / "sub" / "file").read_text() == "B" and (b / "sub" / "file").read_text() == "A"


def test_swap_in_leaves_the_old_tree_at_the_new_name(tmp_path: Path) -> None:
    live, new = _tree(tmp_path / "gentoo", "old"), _tree(tmp_path / ".gentoo.gkeys-x", "new")
    swap_in(new, live)
    assert (live / "sub" / "file").read_text() == "new" and (new / "sub" / "file").read_text() == "old"


def test_swap_in_renames_into_a_missing_or_empty_location(tmp_path: Path) -> None:
    new = _tree(tmp_path / "n1", "one")
    swap_in(new, tmp_path / "gentoo")
    assert (tmp_path / "gentoo" / "sub" / "file").read_text() == "one" and not new.exists()
    (tmp_path / "empty").mkdir()
    swap_in(_tree(tmp_path / "n2", "two"), tmp_path / "empty")
    assert (tmp_path / "empty" / "sub" / "file").read_text() == "two"


def test_recover_after_a_kill_between_the_fallback_renames(tmp_path: Path) -> None:
    location = tmp_path / "gentoo"
    _tree(previous_path(location), "old")  # what a kill after "location -> previous" leaves
    assert recover(location)
    assert (location / "sub" / "file").read_text() == "old" and not previous_path(location).exists()
    _tree(previous_path(location), "older")  # a kill after both renames: the live tree is the new one
    assert not recover(location)
    assert (location / "sub" / "file").read_text() == "old" and not previous_path(location).exists()


def test_recover_never_follows_a_link_at_the_previous_name(tmp_path: Path) -> None:
    """Issue 43 item 7: a link there (to a directory) is neither renamed back nor removed; it is named with its fix."""
    location = tmp_path / "gentoo"
    target = _tree(tmp_path / "elsewhere", "theirs")
    previous_path(location).symlink_to(target)
    warned: list[str] = []
    assert not recover(location, warned.append)  # no location: main renamed the link into its place
    assert not location.exists() and previous_path(location).is_symlink()
    _tree(location, "live")
    assert not recover(location, warned.append)  # a location: main followed the link and failed in rmtree
    assert (target / "sub" / "file").read_text() == "theirs" and previous_path(location).is_symlink()
    assert len(warned) == 2 and f"rm {previous_path(location)}" in warned[0]
