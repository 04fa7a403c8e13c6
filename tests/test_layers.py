"""The package's layers, enforced by reading every import (design.md section 2).

``cli/`` and ``portage/`` are two faces over ``ui/`` (shared presentation), ``verify/`` and ``core/``;
neither face imports the other, and nothing below a face imports upwards.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gkeys_portage"

# layer -> the gkeys_portage sub-packages it must never import
FORBIDDEN = {
    "portage": ("cli", "demo"),
    "ui": ("cli", "portage", "demo"),
    "verify": ("cli", "portage", "ui", "demo"),
    "core": ("cli", "portage", "ui", "demo", "verify"),
}


def imported_modules(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """Every module ``path`` imports (absolute names; relative imports resolved), with line numbers."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root.parent).with_suffix("").parts[:-1])
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
            for banned in FORBIDDEN[layer]:
                prefix = f"gkeys_portage.{banned}"
                if module == prefix or module.startswith(prefix + "."):
                    bad.append(f"{path.relative_to(root.parent)}:{line} imports {module}")
    return sorted(set(bad))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_never_imports_upwards_or_sideways(layer: str) -> None:
    assert violations(layer) == []


def test_the_scanner_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The rule can fail: an import hidden in a function or written relatively is still found."""
    root = tmp_path / "gkeys_portage"
    (root / "portage").mkdir(parents=True)
    probe = root / "portage" / "_layer_probe.py"
    probe.write_text("def f():\n    from ..cli import main\n    import gkeys_portage.cli.common\n", encoding="utf-8")
    found = violations("portage", root)
    assert "gkeys_portage/portage/_layer_probe.py:2 imports gkeys_portage.cli.main" in found
    assert "gkeys_portage/portage/_layer_probe.py:3 imports gkeys_portage.cli.common" in found
