"""Issue 15 item 3: every refusal says why and what next; missing trust never reads like an attack.

The CLI in-process with real gpg (the session keys), and a scan of every user-visible error string
in the package for a bare "failed" (a verdict without its cause).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import GkeysEnv

PACKAGE = Path(__file__).resolve().parent.parent / "gkeys_portage"


def _signed_file(env: GkeysEnv, signer: str = "releng") -> Path:
    path = env.root / "file.txt"
    path.write_bytes(b"hello\n")
    path.with_name("file.txt.asc").write_bytes(env.keys.sign_bytes(signer, b"hello\n", env.root))
    return path


def test_an_empty_keyring_is_missing_trust_with_the_command_that_adds_it(env: GkeysEnv) -> None:
    result = env.run("verify", "-F", str(_signed_file(env)), "-C", "gentoo")
    assert result.code == 1
    assert "(not in the keyring); the gentoo keyring holds no keys at all (missing trust, not a bad " \
           f"signature): install the pinned keys with: {env.gkeys} install-key -C gentoo" in result.err, result.err


def test_a_typo_category_lists_the_installed_ones(env: GkeysEnv) -> None:
    result = env.run("verify", "-F", str(_signed_file(env)), "-C", "gentooo")
    assert result.code == 2
    installed = "gentoo, gentoo-auth, gentoo-infra"  # the packaged roots count as installed
    assert (f"unknown category 'gentooo': the installed categories are {installed} ({env.gkeys} list-cats)"
            in result.err), result.err
    repo = env.root / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    tree = env.run("verify-tree", str(repo), "-C", "gentoo-devss")
    assert tree.code == 2 and "unknown category 'gentoo-devss'" in tree.err, tree.err
    assert "update-seed -C gentoo-devss" not in tree.err  # never a network fetch of the typo


def test_verify_tree_says_not_a_git_repository_first(env: GkeysEnv) -> None:
    plain = env.root / "plain"
    plain.mkdir()
    result = env.run("verify-tree", str(plain))  # no seeds of gentoo-devs either: the repository comes first
    assert result.code == 2 and f"{plain} is not a git repository" in result.err, result.err


def test_verify_overlays_without_a_signature_mentions_s(env: GkeysEnv) -> None:
    listing = env.root / "repositories.xml"
    listing.write_bytes(b"<repositories/>\n")
    result = env.run("verify-overlays", str(listing))
    assert result.code == 1 and "no such file (give -s SIG)" in result.err, result.err


def test_verbose_failure_names_the_config_file_and_state_directory(env: GkeysEnv) -> None:
    result = env.run("verify", "-F", str(_signed_file(env)), "-C", "gentoo", "-v")
    assert result.code == 1
    assert f"config file: {env.config}; state directory: {env.state}" in result.err, result.err
    assert "state directory" not in env.run("verify", "-F", str(_signed_file(env)), "-C", "gentoo").err


# -- no bare "failed" --------------------------------------------------------------------------------

#: A verdict at the end of a message; what comes before it must say why (at least three words).
VERDICT = re.compile(r"\b(failed|fails|error|not verified|refused|NOT verified)[\s.!]*$")
SAYERS = {"error", "fail", "eerror"}


def _text(node: ast.AST) -> str | None:
    """The literal text of a message (f-string holes as ``{}``), or None if it is not a literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return (_text(node.left) or "{}") + (_text(node.right) or "{}")
    return None


def error_strings(root: Path) -> list[tuple[str, int, str]]:
    """Every exception message raised and every line printed as an error, with file and line."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            message: ast.AST | None = None
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                message = node.exc.args[0]
            elif isinstance(node, ast.Call) and node.args:
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in SAYERS:
                    message = node.args[0]
                elif name == "say" and len(node.args) > 1 and _text(node.args[0]) == "error":
                    message = node.args[1]
            text = _text(message) if message is not None else None
            if text is not None:
                found.append((str(path.relative_to(root.parent)), node.lineno, text))
    return found


def is_bare(text: str) -> bool:
    """A verdict ("... failed", "NOT verified") with fewer than three words of cause before it."""
    verdict = VERDICT.search(text.strip())
    return verdict is not None and len(re.findall(r"[A-Za-z]{2,}", text.strip()[:verdict.start()])) < 3


def bare(root: Path) -> list[str]:
    return [f"{path}:{line}: {text!r}" for path, line, text in error_strings(root) if is_bare(text)]


def test_no_error_string_is_a_bare_failed() -> None:
    assert len(error_strings(PACKAGE)) > 300  # the scan sees the package's messages
    assert bare(PACKAGE) == []


def test_the_scan_can_fail(tmp_path: Path) -> None:
    probe = tmp_path / "pkg" / "probe.py"
    probe.parent.mkdir()
    probe.write_text('def f(x):\n    raise BadInputError(f"{x}: download failed")\n'
                     'def g(report):\n    report.error("NOT verified")\n'
                     'def h():\n    say("error", "fetch failed.")\n', encoding="utf-8")
    assert len(bare(tmp_path / "pkg")) == 3


def test_demo_into_a_file_keeps_each_refusal_reason_next_to_its_title(tmp_path: Path) -> None:
    """Issue 15 item 8: ``gkeys demo > log`` put the titles in the log and the reasons on the terminal."""
    log = tmp_path / "log"
    with open(log, "w", encoding="utf-8") as out:
        result = subprocess.run([sys.executable, "-m", "gkeys_portage.cli.main", "demo"], stdout=out,
                                stderr=subprocess.PIPE, text=True, timeout=600, check=False, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    blocks = log.read_text(encoding="utf-8").split("\n\n")
    refused = [block for block in blocks if " * REFUSED:" in block]
    assert len(refused) >= 8
    for block in refused:
        why = [line for line in block.splitlines()
               if line.strip() and " * REFUSED:" not in line and not line.startswith("   $ ")]
        assert why, block  # after the title and the command: at least one line that says why


def test_key_commands_refuse_a_typo_category_instead_of_an_empty_success(env: GkeysEnv) -> None:
    for argv in (("install-key", "-C", "gentooo"), ("list-key", "-C", "gentooo"), ("refresh-key", "-C", "gentooo")):
        result = env.run(*argv)
        assert result.code == 2 and "unknown category 'gentooo': the installed categories are" in result.err, argv
