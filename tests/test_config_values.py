"""The whole config is checked when it is loaded (issue 37, item 5): every value of every key, with "did you mean";
[purposes] against the seeds; add-seed --purpose gives a seed its purpose; add-seed into a category with purposes
warns, naming the fix."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from conftest import GkeysEnv

from gkeys_portage.checks.glep63.specs import SPECS
from gkeys_portage.core.configedit import set_option
from gkeys_portage.core.configschema import CHOICES, KINDS, SCHEMA


@pytest.mark.parametrize(("extra", "said"), [
    ("[media]\nall-digests = yess\n", "[media] all-digests: expected yes or no, not 'yess' (did you mean 'yes'?)"),
    ("[tree]\npolicy = tops\n", "[tree] policy: unknown value 'tops' (did you mean 'top'?)"),
    ("[checks]\nspec = glep63-2.3\n", "[checks] spec: unknown value 'glep63-2.3' (did you mean 'glep63-2.2'?)"),
    ("[overlays]\nmax-age = a week\n", "[overlays] max-age: not a number: 'a week'"),
    ("[fetch]\ncategory = gentoo devs\n", "[fetch] category: invalid category 'gentoo devs'"),
    ("[purposes]\nrelease-media = gentoo:releng\n", "[purposes] release-media: 'gentoo:releng' is not category/nick"),
])
def test_every_value_is_checked_by_every_command(env: GkeysEnv, extra: str, said: str) -> None:
    env.write_config(extra)
    result = env.run("list-cats")  # a command that reads none of these values
    assert result.code == 2 and said in result.err, result.text
    assert json.loads(env.run("--json", "list-cats").out)["reason"] == "config"


def test_schema_kinds_name_known_keys_and_spec_choices_match_the_specs() -> None:
    assert all(key in SCHEMA[section] for section, key in KINDS)
    assert CHOICES[("checks", "spec")] == tuple(SPECS)


def test_purposes_naming_no_seed_is_refused_with_the_nearest(env: GkeysEnv) -> None:
    env.write_config("[purposes]\nrelease-media = gentoo/relengx\n")
    result = env.run("list-cats")  # gentoo's packaged seeds are there: the nick is judged against them
    assert result.code == 2 and "names no seed of gentoo (did you mean gentoo/releng?)" in result.err, result.text
    env.write_config("[purposes]\nrelease-media = mine/somebody\n")  # no seeds of 'mine' yet: not judged
    assert env.run("list-cats").code == 0


def test_add_seed_with_purpose_writes_the_config_line_and_keeps_the_rest(env: GkeysEnv) -> None:
    env.write_config("# my comment\n[media]\n; kept\ncategory = gentoo\n")
    before = env.config.read_text()
    fpr = env.keys.keys["releng"].fingerprint
    result = env.run("add-seed", "-C", "gentoo", "-n", "myrel", "-N", "My releng", "-K", fpr,
                     "--purpose", "release-media")
    assert result.code == 0, result.text
    text = env.config.read_text()
    assert text.startswith(before) and "# my comment" in text and "; kept" in text
    assert text.endswith("[purposes]\nrelease-media = gentoo/releng gentoo/weekly gentoo/myrel\n"), text
    assert env.run("list-cats").code == 0  # the new line names a seed that exists


def test_add_seed_into_a_category_with_purposes_warns_with_a_runnable_fix(env: GkeysEnv) -> None:
    fpr = env.keys.keys["releng"].fingerprint
    result = env.run("add-seed", "-C", "gentoo", "-n", "myrel", "-N", "My releng", "-K", fpr)
    assert result.code == 0 and "gentoo has key purposes" in result.err, result.text
    fix = result.err.split("overlay-list): ", 1)[1].strip().replace("PURPOSE", "release-media")
    for part in fix.split(" && "):
        assert env.run(*shlex.split(part)[1:]).code == 0, part
    assert "gentoo/myrel" in env.config.read_text()


def test_set_option_replaces_the_line_of_the_key_in_its_section(tmp_path: Path) -> None:
    conf = tmp_path / "gkeys.conf"
    conf.write_text("[purposes]\nrelease-media = a/b\n  c/d\n# note\n\n[tree]\npolicy = top\n")
    set_option(conf, "purposes", "release-media", "a/b c/d e/f")
    set_option(conf, "tree", "category", "gentoo-devs")
    assert conf.read_text() == ("[purposes]\nrelease-media = a/b c/d e/f\n# note\n\n[tree]\npolicy = top\n"
                                "category = gentoo-devs\n")


def test_a_purpose_naming_a_seed_not_added_yet_never_blocks_adding_it(env: GkeysEnv) -> None:
    """Issue 42: configuring a purpose first (the order the docs' examples read in) made every command exit 2,
    add-seed included, the one command that fixes it."""
    env.write_config("[purposes]\nrelease-media = gentoo/releng gentoo/weekly gentoo/newkey\n")
    refused = env.run("list-cats")
    assert refused.code == 2, refused.text
    assert f"'{env.gkeys} add-seed -C gentoo -n newkey -N NAME -K FINGERPRINT'" in refused.err, refused.err
    assert "change the line to 'release-media = gentoo/releng gentoo/weekly'" in refused.err, refused.err
    fpr = env.keys.keys["releng"].fingerprint
    added = env.run("add-seed", "-C", "gentoo", "-n", "newkey", "-N", "New release key", "-K", fpr)
    assert added.code == 0, added.text
    assert env.run("list-cats").code == 0
    env.write_config("[purposes]\noverlay-list = gentoo/other\n")  # the only seed of the line: remove the line
    assert "remove the line 'overlay-list = gentoo/other'" in env.run("list-cats").err
    other = env.run("add-seed", "-C", "gentoo", "-n", "another", "-N", "Another", "-K", fpr)
    assert other.code == 2 and "gentoo/other names no seed of gentoo" in other.err  # only the seed being added
