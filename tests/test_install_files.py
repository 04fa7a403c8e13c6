"""Installed files (issue 14, item 2): a wheel installs hooks, eclass, bashrc snippet, sample config, man
pages and bash completion where :mod:`gkeys_portage.installfiles` says; the generated ones match the
argparse definitions; the sample config names every option the code reads, with the code's defaults.
"""

from __future__ import annotations

import ast
import configparser
import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gkeys_portage import installfiles
from gkeys_portage.cli import docgen
from gkeys_portage.core import configschema
from gkeys_portage.core.config import load_config

PROJECT = Path(__file__).resolve().parent.parent
SAMPLE = PROJECT / installfiles.SAMPLE_CONFIG
# Calls that read one option: method name -> index of the section argument.
_READERS = {"get": 0, "number": 0, "getboolean": 0, "getfloat": 0, "getint": 0, "has_option": 0, "flag": 0,
            "_float": 1, "_bool": 1}
# Sections whose keys are names chosen by the user (categories), or read as a whole (notify; purposes, one key
# per keys.purposes.Purpose), not one by one.
_FREE_SECTIONS = {"seedurls", "verify-seeds", "authority-seeds", "keyrings", "notify", "purposes"}


def _constants(tree: ast.Module) -> dict[str, object]:
    values: dict[str, object] = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)):
            values[node.targets[0].id] = node.value.value
    return values


def _literal(node: ast.expr | None, constants: dict[str, object]) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    return None


def options_read_by_code() -> dict[tuple[str, str], list[object]]:
    """(section, option) -> literal defaults, for every config read in the package (found in its source)."""
    found: dict[tuple[str, str], list[object]] = {}
    for path in sorted((PROJECT / "gkeys_portage").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = _constants(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name not in _READERS:
                continue
            receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else "parser"
            if name not in ("_float", "_bool") and not receiver.endswith(("config", "parser")):
                continue
            first = _READERS[name]
            args = node.args[first:first + 3]
            section, option = (_literal(a, constants) for a in args[:2]) if len(args) >= 2 else (None, None)
            if not isinstance(section, str) or not isinstance(option, str):
                continue
            fallback = args[2] if len(args) > 2 else next((k.value for k in node.keywords if k.arg == "fallback"),
                                                           None)
            found.setdefault((section, option), []).append(_literal(fallback, constants))
    return found


def sample_options() -> dict[tuple[str, str], str]:
    """(section, option) -> documented default of the sample config."""
    return {(section.name, name): default for section in docgen.parse_sample_config(SAMPLE.read_text())
            for name, default, _ in section.options}


def test_the_sync_module_distribution_has_the_package_version() -> None:
    main = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]
    sync = tomllib.loads((PROJECT / "portage-sync-module" / "pyproject.toml").read_text())["project"]
    assert sync["version"] == main["version"]
    assert f"gkeys-portage=={main['version']}" in sync["dependencies"]
    assert any(dep.startswith("portage") for dep in sync["dependencies"]), "the leaf exists only beside Portage"


def test_generated_files_match_the_argparse_definitions() -> None:
    assert docgen.stale_files(PROJECT) == [], "run: python3 -m gkeys_portage.cli.docgen"
    scripts = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["scripts"]
    assert [p.name for p in docgen.programs()] == list(installfiles.PROGRAMS) == list(scripts)
    assert {f"{name}.1" for name in scripts} < set(installfiles.MAN_PAGES)


def test_sample_config_names_every_option_the_code_reads() -> None:
    code = options_read_by_code()
    sample = sample_options()
    assert len(code) > 30, sorted(code)  # the scan found the readers
    missing = sorted(key for key in code if key not in sample)
    assert not missing, f"options read by the code but absent from {SAMPLE.name}: {missing}"
    extra = sorted(key for key in sample if key not in code and key[0] not in _FREE_SECTIONS)
    assert not extra, f"options in {SAMPLE.name} that no code reads: {extra}"
    for key, defaults in code.items():
        for default in defaults:
            if isinstance(default, str):
                assert sample[key] == default, (key, sample[key], default)
            elif isinstance(default, int | float) and not isinstance(default, bool):
                assert float(sample[key]) == float(default), (key, sample[key], default)


def test_sample_config_uncommented_equals_the_builtin_defaults(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Uncommenting every option of the sample changes nothing: its defaults are the code's."""
    option = re.compile(r"# ([a-z0-9-]+ =.*|\[[a-z0-9-]+\])")  # options, and the headers of built-in lines
    lines = [match.group(1) if (match := option.fullmatch(line)) else line
             for line in SAMPLE.read_text().splitlines()]
    conf = tmp_path / "gkeys.conf"
    conf.write_text("\n".join(lines) + "\n")
    parser = configparser.ConfigParser(inline_comment_prefixes=(";",), interpolation=None)
    parser.read_string(conf.read_text())
    assert {(s, o) for s in parser.sections() for o in parser.options(s)} == set(sample_options())
    monkeypatch.setenv("EPREFIX", str(tmp_path / "eprefix"))  # no default config file there
    monkeypatch.delenv("GKEYS_CONFIG", raising=False)
    explicit = load_config(conf, tmp_path / "root")
    builtin = load_config(None, tmp_path / "root")
    assert builtin.path is None and explicit.path == conf
    for name in ("seedurls", "verify_seeds", "sources", "policy", "sign_category", "sign_nick", "sign_homedir"):
        assert getattr(explicit, name) == getattr(builtin, name), name


def _config_fields(config: object) -> dict[str, object]:
    """Every field of a loaded Config but where it came from (``path``) and the raw parser."""
    return {field.name: getattr(config, field.name) for field in dataclasses.fields(config)  # type: ignore[arg-type]
            if field.name not in ("path", "parser")}


def test_the_shipped_config_as_shipped_equals_no_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 42: the installed /etc/gkeys/gkeys.conf configures exactly what no file does (its empty
    [authority-seeds] section used to replace the built-in gentoo-devs line: developer keys off)."""
    monkeypatch.setenv("EPREFIX", str(tmp_path / "eprefix"))  # no default config file there
    monkeypatch.delenv("GKEYS_CONFIG", raising=False)
    shipped = load_config(SAMPLE, tmp_path / "root")
    builtin = load_config(None, tmp_path / "root")
    assert shipped.path == SAMPLE and builtin.path is None
    assert _config_fields(shipped) == _config_fields(builtin)
    assert "gentoo-devs" in shipped.authority.sources
    # every option a verifier reads with its own fallback: none is set, so every one reads its default
    assert {(s, o): v for s in shipped.parser.sections() for o, v in shipped.parser.items(s)} == {}
    assert SAMPLE.read_text() == configschema.sample_config(), "run: python3 -m gkeys_portage.cli.docgen"


def test_completion_completes_the_verify_actions() -> None:
    out = _complete(PROJECT / installfiles.COMPLETION, "gkeys", "ver")
    assert out.splitlines()[0] == "complete -o filenames -F _gkeys gkeys"
    assert out.splitlines()[1].split() == ["verify", "verify-media", "verify-overlays", "verify-snapshot",
                                           "verify-tree"]
    assert _complete(PROJECT / installfiles.COMPLETION, "gkeys", "verify-tree", "--pol").splitlines()[1] == "--policy"
    assert _complete(PROJECT / installfiles.COMPLETION, "gkeys", "verify-tree", "--policy", "").splitlines()[1] \
        .split() == ["top", "all"]


def _complete(script: Path, *words: str) -> str:
    """Source the completion script in a clean bash, complete ``words`` (the last one is being typed)."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = f"""
        source {script}
        complete -p {words[0]}
        COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}
        $(complete -p {words[0]} | sed -E 's/.*-F ([^ ]+) .*/\\1/')
        echo "${{COMPREPLY[*]}}"
    """
    result = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
                            check=False, env={"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]})
    assert result.returncode == 0 and not result.stderr, result.stderr
    return result.stdout


def render_man(page: Path) -> tuple[str, str]:
    """``man -l`` the page; (rendered text, warnings)."""
    result = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True, text=True, check=False,
                            env={**os.environ, "MANWIDTH": "80", "MAN_KEEP_FORMATTING": "", "PAGER": "cat"})
    assert result.returncode == 0, result.stderr
    return result.stdout, result.stderr


def _see_our_dependencies(prefix: Path) -> None:
    """Let the venv at ``prefix`` import the dependencies installed for the running interpreter.

    ``system_site_packages=True`` is not that: inside a venv it exposes the *base* Python's site-packages, which
    on a fresh machine holds none of them (README's ``pip install ".[test]"`` put them into the venv). A ``.pth``
    file that adds the running interpreter's site directories works in a venv and system-wide alike; the new venv's
    own site-packages stays first on ``sys.path``, so the wheel's ``gkeys_portage`` wins over the tested one.
    ``site.addsitedir`` (not a bare path) also runs their ``.pth`` files, coverage's among them (``.ci/run``).
    """
    ours = [entry for entry in sys.path if Path(entry).name in ("site-packages", "dist-packages")]
    site = subprocess.run([str(prefix / "bin" / "python"), "-c", "import sysconfig; print(sysconfig"
                           ".get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "_gkeys_test_deps.pth").write_text("".join(f"import site; site.addsitedir({entry!r})\n"
                                                             for entry in ours))


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A wheel built from this checkout, installed into a fresh venv; yields the venv's prefix."""
    if importlib.util.find_spec("wheel") is None:
        pytest.skip("the 'wheel' package is missing (pip install '.[test]')")
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(PROJECT, source, ignore=shutil.ignore_patterns(".git", "__pycache__", "build", "*.egg-info"))
    for project in (source, source / "portage-sync-module"):
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                        "-w", str(work / "dist"), str(project)], check=True, capture_output=True)
    prefix = work / "venv"
    venv.create(prefix, with_pip=False)
    _see_our_dependencies(prefix)
    wheel = next((work / "dist").glob("gkeys_portage-*.whl"))
    assert not [name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("portage/")], \
        "gkeys-portage itself ships nothing named portage (the sync module is portage-sync-module/)"
    sync_wheel = next((work / "dist").glob("gkeys_portage_sync-*.whl"))
    assert sorted(n for n in zipfile.ZipFile(sync_wheel).namelist() if not n.startswith("gkeys_portage_sync-")) \
        == ["portage/sync/modules/gkeys/__init__.py", "portage/sync/modules/gkeys/gkeyssync.py"]
    subprocess.run([sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", "--ignore-installed", str(wheel)], check=True, capture_output=True)
    site = Path(subprocess.run([str(prefix / "bin" / "python"), "-c", "import sysconfig; print(sysconfig"
                                ".get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    assert not (site / "portage").exists(), "without Portage, installing gkeys-portage leaves no 'portage' behind"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", "--ignore-installed", str(sync_wheel)], check=True, capture_output=True)
    yield prefix


@pytest.mark.slow
def test_wheel_installs_every_file(installed: Path) -> None:
    share = [item for item in installfiles.DATA_FILES if item.group == "share"]
    assert {item.installed(installed).relative_to(installed).as_posix() for item in share} >= {
        "share/gkeys-portage/hooks/repo.postsync.d/gkeys-verify", "share/gkeys-portage/hooks/postsync.d/gkeys-verify",
        "share/gkeys-portage/hooks/bashrc.d/gkeys.sh", "share/gkeys-portage/eclass/gkeys-verify.eclass",
        "share/gkeys-portage/gkeys.conf", "share/man/man1/gkeys.1", "share/man/man5/gkeys.conf.5",
        "share/man/man1/gkeys-gen.1", "share/man/man1/gkeys-ldap.1", "share/man/man1/gkeys-fetch.1",
        "share/bash-completion/completions/gkeys", "share/bash-completion/completions/gkeys-gen",
        "share/bash-completion/completions/gkeys-ldap", "share/bash-completion/completions/gkeys-fetch"}
    for item in share:
        path = item.installed(installed)
        assert path.read_bytes() == (PROJECT / item.source).read_bytes(), path
        if item.executable:
            assert os.access(path, os.X_OK), path
    site = Path(subprocess.run([str(installed / "bin" / "python"), "-c", "import sysconfig; print(sysconfig"
                                ".get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    assert (site / "portage" / "sync" / "modules" / "gkeys" / "__init__.py").is_file()
    assert not (site / "portage" / "__init__.py").exists()
    assert (site / "gkeys_portage" / "installfiles.py").is_file()
    for script in installfiles.PROGRAMS:
        result = subprocess.run([str(installed / "bin" / script), "--help"], capture_output=True, text=True,
                                check=False, cwd=installed, env={**os.environ, "PYTHONPATH": ""})
        assert result.returncode == 0 and "usage:" in result.stdout, (script, result.stderr)
    # the installed package finds its own share dir (no source checkout next to it)
    probe = subprocess.run([str(installed / "bin" / "python"), "-c", "from gkeys_portage import installfiles as i;"
                            "print(i.hook_file('repo.postsync.d/gkeys-verify'))"], capture_output=True, text=True,
                           check=True, cwd=installed, env={**os.environ, "PYTHONPATH": ""})
    assert Path(probe.stdout.strip()) == installed / "share/gkeys-portage/hooks/repo.postsync.d/gkeys-verify"
    # setup-portage of the installed package writes hooks that run the venv's interpreter
    eroot = installed.parent / "eroot"
    eroot.mkdir()
    (installed.parent / "empty.conf").write_text("")
    result = subprocess.run([str(installed / "bin" / "gkeys"), "--root", str(installed.parent / "state"),
                             "setup-portage", "--eroot", str(eroot)],
                            capture_output=True, text=True, check=False, cwd=installed,
                            env={**os.environ, "PYTHONPATH": "", "GKEYS_CONFIG": str(installed.parent / "empty.conf")})
    assert result.returncode == 0, result.stdout + result.stderr
    hook = (eroot / "etc/portage/repo.postsync.d/gkeys-verify").read_text()
    assert hook.splitlines()[0] == f"#!{installed / 'bin' / 'python'}"
    template = installfiles.hook_file("repo.postsync.d/gkeys-verify").read_text()
    assert hook.split("\n", 1)[1] == template.split("\n", 1)[1]


@pytest.mark.slow
def test_installed_man_pages_render_without_warnings(installed: Path) -> None:
    if shutil.which("man") is None:
        pytest.skip("man is missing (apt-get install man-db groff-base)")
    for page in installfiles.MAN_PAGES:
        text, warnings = render_man(installed / "share" / "man" / f"man{page[-1]}" / page)
        assert warnings == "", (page, warnings)
        assert "NAME" in text and len(text.splitlines()) > 20, page
    text, _ = render_man(installed / "share/man/man1/gkeys.1")
    assert "verify-tree" in text and "--range A..B" in text.replace("\u2010", "-")
    conf, _ = render_man(installed / "share/man/man5/gkeys.conf.5")
    assert "max-refresh-age = 30" in conf.replace("\u2010", "-")


@pytest.mark.slow
def test_installed_completion_completes_gkeys_ver(installed: Path) -> None:
    completions = installed / "share/bash-completion/completions"
    out = _complete(completions / "gkeys", "gkeys", "ver")
    assert out.splitlines()[1].split() == ["verify", "verify-media", "verify-overlays", "verify-snapshot",
                                           "verify-tree"]
    assert _complete(completions / "gkeys-gen", "gkeys-gen", "--al").splitlines()[1].split() == [
        "--algorithm", "--allow-any-email"]
    assert _complete(completions / "gkeys-fetch", "gkeys-fetch", "--u").splitlines()[1] == "--uri"


def test_config_schema_is_the_sample_config() -> None:
    """The table that refuses unknown keys (core/configschema.py) knows exactly the sample's options."""
    from gkeys_portage.core.configschema import OPEN_SECTIONS, SCHEMA

    sample = {key for key in sample_options() if key[0] not in OPEN_SECTIONS}
    assert sample == {(section, key) for section, keys in SCHEMA.items() for key in keys}
    assert {section for section, _ in sample_options()} <= set(SCHEMA) | OPEN_SECTIONS


def _message_strings(path: Path) -> Iterator[str]:
    """Every string constant of a module but its docstrings (what users may see: messages, help, epilogs)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


def test_messages_and_man_pages_name_the_installed_docs() -> None:
    """Issue 42: an installed gkeys has no docs/ directory: what it prints and its man pages name the installed
    file (/usr/share/doc/gkeys-portage/NAME, installfiles.doc_file) or a man page."""
    source_path = re.compile(r"(?<![\w/.-])docs/[a-z-]+\.md")
    found = [f"{path.relative_to(PROJECT)}: {match.group(0)}"
             for path in sorted((PROJECT / "gkeys_portage").rglob("*.py"))
             for text in _message_strings(path) for match in source_path.finditer(text)]
    for path in [*(PROJECT / "docs" / "man").iterdir(), SAMPLE, *(PROJECT / "packaging" / "gentoo").rglob("*.ebuild")]:
        found += [f"{path.relative_to(PROJECT)}: {m.group(0)}" for m in source_path.finditer(path.read_text())]
    assert not found, found
    assert {item.name for item in installfiles.DATA_FILES if item.target == installfiles.DOC_DIR} == \
        {"README.md", "SECURITY.md", *(path.name for path in (PROJECT / "docs").glob("*.md"))}
    assert installfiles.doc_file("portage.md", Path("/usr")) == "/usr/share/doc/gkeys-portage/portage.md"
