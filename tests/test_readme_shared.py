"""The README names every test file that needs ../shared, so a clone without it knows what its run skipped."""

from __future__ import annotations

import re

from conftest import PROJECT


def test_readme_names_every_test_file_that_reads_shared() -> None:
    readme = (PROJECT / "README.md").read_text()
    needing = {path.name for path in (PROJECT / "tests").glob("test_*.py")
               if re.search(r"\bshared_path\(|\bSHARED\b", path.read_text())}
    assert needing, "no test reads ../shared any more: drop the README's table"
    missing = sorted(name for name in needing if name not in readme)
    assert not missing, f"README.md does not say these tests need ../shared: {missing}"
