"""Every test module under tests/e2e/ carries the `e2e` marker at module level, so that
`-m "not e2e"` (the SQLite rerun in ./test.sh) and `-m e2e` select exactly this folder."""

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

E2E = Path(__file__).resolve().parent


def marks_e2e(source: str) -> bool:
    """True if the module assigns `pytestmark` to pytest.mark.e2e, alone or in a list."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            values = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            return any(ast.unparse(v) == "pytest.mark.e2e" for v in values)
    return False


def test_every_e2e_module_has_the_marker():
    modules = sorted(E2E.glob("test_*.py"))
    unmarked = [m.name for m in modules if not marks_e2e(m.read_text())]
    assert len(modules) >= 5 and unmarked == []


def test_the_check_catches_a_module_without_the_marker():
    assert marks_e2e("import pytest\npytestmark = [pytest.mark.e2e, pytest.mark.slow]\n")
    assert not marks_e2e("import pytest\n\ndef test_x():\n    pass\n")
    assert not marks_e2e("import pytest\npytestmark = pytest.mark.slow\n")
