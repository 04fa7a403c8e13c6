"""The package's layers, enforced by reading every import (docs/architecture.md).

Floors, bottom to top: ``core`` < ``openpgp`` < ``keys`` < ``checks`` < ``verify`` < ``ui`` < ``portage``
< ``demo`` < ``cli`` (the demo drives the Portage face's fetch wrapper, and ``cli`` runs the demo).  Nothing
imports a floor above its own (so ``portage`` never imports ``cli``), nothing below ``ui`` imports Portage (the
package manager), and no module imports itself back through any chain (no import circle).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gkeys_portage"

#: Floors from the bottom up; a package may import only the floors below it (and itself).
FLOORS = ("core", "openpgp", "keys", "checks", "verify", "ui", "portage", "demo", "cli")
#: Beyond the order of FLOORS: further packages a floor must never import (none today).
FACES: dict[str, tuple[str, ...]] = {}
#: The nevers docs/architecture.md names, spelt out (the FLOORS order implies them; this keeps them visible).
NEVERS = {
    "core": ("openpgp", "keys", "checks", "verify", "ui", "portage", "demo", "cli"),
    "openpgp": ("keys", "checks", "verify", "ui", "portage", "demo", "cli"),
    "portage": ("cli",),
}
#: Floors that must not import the package manager ``portage`` (the core works on any distribution).
NO_PACKAGE_MANAGER = ("core", "openpgp", "keys", "checks", "verify")


def forbidden(layer: str) -> tuple[str, ...]:
    """The gkeys_portage sub-packages ``layer`` must never import."""
    above = FLOORS[FLOORS.index(layer) + 1:]
    return tuple(sorted(set(above) | set(FACES.get(layer, ())) | set(NEVERS.get(layer, ()))))


def imported_modules(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """Every module ``path`` imports (absolute names; relative imports resolved), with line numbers."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root.parent).with_suffix("").parts[:-1])
    if path.name == "__init__.py":
        package = ".".join(path.relative_to(root.parent).parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):  # also imports inside functions: a lazy import is still an import
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.append((node.lineno, base))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def violations(layer: str, root: Path = PACKAGE) -> list[str]:
    """``file:line imports module`` for every forbidden import in ``layer`` of the package at ``root``."""
    bad = []
    for path in sorted((root / layer).rglob("*.py")):
        for line, module in imported_modules(path, root):
            banned = [f"gkeys_portage.{name}" for name in forbidden(layer)]
            if layer in NO_PACKAGE_MANAGER:
                banned.append("portage")
            if any(module == prefix or module.startswith(prefix + ".") for prefix in banned):
                bad.append(f"{path.relative_to(root.parent)}:{line} imports {module}")
    return sorted(set(bad))


def module_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module name -> the package's modules it imports (``from pkg import name`` counts as ``pkg.name``
    when that is a module, else as ``pkg``)."""
    names = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        targets = set()
        for _, module in imported_modules(path, root):
            while module and module not in names:
                module = module.rpartition(".")[0]
            if module and module != name:
                targets.add(module)
        graph[name] = targets
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


#: The second opinion lives in openpgp/ (design.md §10): no verifier, key operation or Portage module imports
#: pysequoia itself, so every path that asks for a verdict gets both engines without knowing it.
SECOND_OPINION_DOOR = "openpgp"


def second_opinion_importers(root: Path = PACKAGE) -> list[str]:
    """``file:line`` of every import of ``pysequoia`` outside ``openpgp/``."""
    return sorted(f"{path.relative_to(root.parent)}:{line}" for path in root.rglob("*.py")
                  if path.relative_to(root).parts[0] != SECOND_OPINION_DOOR
                  for line, module in imported_modules(path, root)
                  if module == "pysequoia" or module.startswith("pysequoia."))


def test_nothing_outside_openpgp_imports_pysequoia() -> None:
    assert second_opinion_importers() == []


def test_the_pysequoia_never_can_fail(tmp_path: Path) -> None:
    (tmp_path / "gkeys_portage" / "verify").mkdir(parents=True)
    (tmp_path / "gkeys_portage" / "verify" / "x.py").write_text("def f():\n    import pysequoia\n")
    assert second_opinion_importers(tmp_path / "gkeys_portage") == ["gkeys_portage/verify/x.py:2"]


@pytest.mark.parametrize("layer", FLOORS)
def test_layer_never_imports_upwards_or_sideways(layer: str) -> None:
    assert violations(layer) == []


def test_every_subpackage_is_on_a_floor() -> None:
    """A new top-level package must be placed in FLOORS (and in docs/architecture.md) before it is used."""
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(FLOORS), sorted(packages - set(FLOORS))


def test_no_import_circle() -> None:
    assert circles(module_graph()) == []


def test_the_scanner_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The rule can fail: an import hidden in a function or written relatively is still found."""
    root = tmp_path / "gkeys_portage"
    (root / "portage").mkdir(parents=True)
    probe = root / "portage" / "_layer_probe.py"
    probe.write_text("def f():\n    from ..cli import main\n    import gkeys_portage.cli.common\n", encoding="utf-8")
    found = violations("portage", root)
    assert "gkeys_portage/portage/_layer_probe.py:2 imports gkeys_portage.cli.main" in found
    assert "gkeys_portage/portage/_layer_probe.py:3 imports gkeys_portage.cli.common" in found


def test_the_nevers_can_fail(tmp_path: Path) -> None:
    """openpgp importing keys, and core importing the package manager, are both found."""
    root = tmp_path / "gkeys_portage"
    for layer in ("openpgp", "core"):
        (root / layer).mkdir(parents=True)
    (root / "openpgp" / "probe.py").write_text("from gkeys_portage.keys.seeds import Seed\n", encoding="utf-8")
    (root / "core" / "probe.py").write_text("def f():\n    import portage.output\n", encoding="utf-8")
    assert violations("openpgp", root) == ["gkeys_portage/openpgp/probe.py:1 imports gkeys_portage.keys.seeds",
                                           "gkeys_portage/openpgp/probe.py:1 imports gkeys_portage.keys.seeds.Seed"]
    assert violations("core", root) == ["gkeys_portage/core/probe.py:2 imports portage.output"]


def test_the_circle_finder_can_fail(tmp_path: Path) -> None:
    root = tmp_path / "gkeys_portage"
    (root / "cli").mkdir(parents=True)
    (root / "demo").mkdir()
    for package in ("", "cli", "demo"):
        (root / package / "__init__.py").write_text("", encoding="utf-8")
    (root / "cli" / "main.py").write_text("from gkeys_portage.cli import demo\n", encoding="utf-8")
    (root / "cli" / "demo.py").write_text("def f():\n    from gkeys_portage.demo.runner import run\n", encoding="utf-8")
    (root / "demo" / "runner.py").write_text("def g():\n    from gkeys_portage.cli.main import main\n",
                                             encoding="utf-8")
    assert circles(module_graph(root)) == [["gkeys_portage.cli.demo", "gkeys_portage.cli.main",
                                            "gkeys_portage.demo.runner"]]


def test_no_module_is_too_long_and_no_folder_too_full() -> None:
    """docs/architecture.md: a module passes ~500 lines or a folder ~15 modules only with a reason here."""
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 520}
    assert long == {}
    full = {str(d.relative_to(PACKAGE)): n for d in [PACKAGE, *PACKAGE.rglob("*/")]
            if d.is_dir() and (n := len([p for p in d.glob("*.py") if p.name != "__init__.py"])) > 16}
    assert full == {}
