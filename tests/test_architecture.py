"""The code's shape: no import cycles, the portal by concept (docs/architecture.md's layout
true to the tree, no mechanism named outside its kind folder), and `mechanisms` free of Django.

The import graph is read from the source with `ast` (imports at module top and inside
functions alike), so an import hidden in a function cannot hide a cycle. An edge goes to the
module named: `from . import x` to the submodule x when there is one, else to the package.
Importing a submodule also runs its package's `__init__`, but that implicit edge is not
counted (a package re-exporting its submodules is not a cycle).
"""

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dpportal", "mechanisms")
ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"
# The only modules at dpportal/'s top: Django's and Celery's entry points. Everything else lives
# in the package of its concept (core, access, datasets, sources, releases, audit, api, ...).
DJANGO_ENTRY_POINTS = {
    "__init__", "admin", "apps", "celery", "checks", "models", "settings", "signals", "tasks",
    "urls", "wsgi",
}  # fmt: skip
KINDS = REPO_ROOT / "dpportal" / "releases" / "kinds"


def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of PACKAGES."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _known(name: str, modules) -> str | None:
    """The longest prefix of `name` that is one of our modules."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imported_modules(name: str, path: Path, modules) -> set[str]:
    """Our modules that `name` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets.update(_known(alias.name, modules) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if not is_package:
                    base.pop()
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                targets.add(_known(f"{source}.{alias.name}", modules) or _known(source, modules))
    return {t for t in targets if t and t != name}


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def cycles(graph) -> list[list[str]]:
    """One cycle (as a path back to its start) per strongly connected group of modules."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_through(graph, group) for group in groups]


def _cycle_through(graph, group) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & group):
                if target == start:
                    return paths[node] + [start]
                if target not in paths:
                    paths[target] = paths[node] + [target]
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle in {group}")


def _describe(found) -> str:
    return "; ".join(" -> ".join(cycle) for cycle in found)


def test_the_graph_reader_sees_imports_inside_functions(tmp_path):
    """Guard for the test itself: a cycle made only by a function-level import is found."""
    graph = {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.a"]]
    source = tmp_path / "b.py"
    source.write_text("def f():\n    from . import a\n")
    known = {"pkg": None, "pkg.a": None, "pkg.b": None}
    assert imported_modules("pkg.b", source, known) == {"pkg.a"}


def test_dpportal_has_no_import_cycle():
    found = [c for c in cycles(import_graph()) if any(m.startswith("dpportal") for m in c)]
    assert not found, f"import cycles: {_describe(found)}"


def test_mechanisms_has_no_import_cycle():
    found = [c for c in cycles(import_graph()) if all(m.startswith("mechanisms") for m in c)]
    assert not found, f"import cycles: {_describe(found)}"


def test_dpportal_top_holds_only_django_entry_points():
    """A new module goes into the package of its concept, not beside settings.py."""
    top = {path.stem for path in (REPO_ROOT / "dpportal").glob("*.py")}
    assert top - DJANGO_ENTRY_POINTS == set()


def packages(root: Path) -> list[Path]:
    """Every package folder under `root` (with an __init__.py), migrations excluded."""
    return sorted(
        path.parent
        for path in root.rglob("__init__.py")
        if "migrations" not in path.parts and "__pycache__" not in path.parts
    )


def test_every_concept_package_says_what_it_holds():
    undocumented = [
        str(folder.relative_to(REPO_ROOT))
        for folder in packages(REPO_ROOT / "dpportal") + packages(REPO_ROOT / "mechanisms")
        if folder.parent.name != "management"
        and folder.name not in ("templatetags", "management")
        and not ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
    ]
    assert undocumented == []


def layout_block(text: str) -> dict[str, str]:
    """The folders of the architecture notes' layout block, by path, with their description."""
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    folders: dict[str, str] = {}
    stack: list[str] = []
    current = None
    for line in block.splitlines():
        token = line.strip().split(" ", 1)[0]
        if token.endswith("/"):
            depth = (len(line) - len(line.lstrip())) // 2
            stack = stack[:depth] + [token.rstrip("/")]
            current = "/".join(stack)
            folders[current] = line.strip()[len(token) :]
        elif current and line.strip():
            folders[current] += " " + line.strip()
    return folders


def layout_problems(folders: dict[str, str], root: Path) -> list[str]:
    """Listed folders that do not exist, packages that are not listed, and modules of a listed
    package that its description does not name."""
    problems = [f"{path}/ is listed but missing" for path in folders if not (root / path).is_dir()]
    for package in packages(root / "dpportal") + packages(root / "mechanisms"):
        path = package.relative_to(root).as_posix()
        if path not in folders:
            problems.append(f"{path}/ is not listed")
            continue
        for module in sorted(package.glob("*.py")):
            named = re.search(rf"(?<![\w.]){re.escape(module.stem)}(?![\w/])", folders[path])
            if module.stem != "__init__" and not named:
                problems.append(f"{path}/{module.name} is not named")
    return problems


def test_the_architecture_notes_layout_is_the_tree():
    assert layout_problems(layout_block(ARCHITECTURE.read_text()), REPO_ROOT) == []


def test_the_layout_check_finds_a_stale_folder_a_missing_package_and_an_unnamed_module(tmp_path):
    """Broken twins: each kind of drift from the tree is named."""
    for folder in ("dpportal/core", "dpportal/gone_now", "mechanisms"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text('"""x"""')
    (tmp_path / "dpportal" / "core" / "files.py").write_text("")
    (tmp_path / "dpportal" / "core" / "shiny.py").write_text("")
    text = "## Layout\n```\nmechanisms/  x\ndpportal/  x\n  core/  files,\n  later/  y\n```\n"
    (tmp_path / "dpportal" / "__init__.py").write_text('"""x"""')
    assert layout_problems(layout_block(text), tmp_path) == [
        "dpportal/later/ is listed but missing",
        "dpportal/core/shiny.py is not named",
        "dpportal/gone_now/ is not listed",
    ]


def mechanism_literals(root: Path, names: set[str]) -> list[str]:
    """String constants equal to a mechanism's name or one of its public files, in portal code
    outside the kind folders: a branch on a mechanism that belongs in its kind."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "migrations" in path.parts or KINDS in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.value!r}")
    return found


def _kind_names() -> set[str]:
    from mechanisms.catalogue import CATALOGUE

    files = {name for spec in CATALOGUE.values() for name in spec.files}
    return set(CATALOGUE) | files - {"manifest.json", "README.txt"}


def test_no_mechanism_is_named_outside_its_kind_folder():
    assert mechanism_literals(REPO_ROOT / "dpportal", _kind_names()) == []


def test_a_branch_on_a_mechanism_name_is_found(tmp_path):
    """Broken twin: `if mechanism == "mwem"` in a page module is named."""
    (tmp_path / "views.py").write_text('def f(mechanism):\n    return mechanism == "mwem"\n')
    assert mechanism_literals(tmp_path, _kind_names()) == [f"{tmp_path.name}/views.py:2 'mwem'"]


def django_imports(root: Path) -> list[str]:
    """Imports of django or dpportal anywhere in the package at `root` (read with `ast`)."""
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            offenders += [
                f"{path.relative_to(root.parent)}: {name}"
                for name in names
                if name.split(".")[0] in ("django", "dpportal")
            ]
    return offenders


IMPORT_ALL = """
import importlib, pkgutil, sys
package = importlib.import_module(sys.argv[1])
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("django", "dpportal"))
assert not loaded, loaded
print(len([m for m in sys.modules if m.split(".")[0] == package.__name__]))
"""


def import_everything(package: str, search_path: Path):
    """Import every module of `package` in a fresh interpreter with a clean environment (no
    DJANGO_SETTINGS_MODULE); fail if django or dpportal got loaded."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(search_path)}
    return subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, package],
        cwd=search_path,
        env=env,
        capture_output=True,
        text=True,
    )


def test_mechanisms_source_never_imports_django():
    assert django_imports(REPO_ROOT / "mechanisms") == []


def test_importing_mechanisms_loads_no_django():
    result = import_everything("mechanisms", REPO_ROOT)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 5  # the submodules really were imported


def test_the_django_checks_catch_a_planted_import(tmp_path):
    """Guard for the two tests above: a package that imports django in a function (AST) or at
    its top (subprocess) is caught."""
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("import django\n")
    (package / "deep.py").write_text("def f():\n    from django.db import models\n")
    assert django_imports(package) == ["planted/__init__.py: django", "planted/deep.py: django.db"]
    result = import_everything("planted", tmp_path)
    assert result.returncode != 0 and "django" in result.stderr


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(root: Path) -> list[str]:
    """Imports of a private name (one starting with `_`; dunder names like __version__ are
    public) from another module, anywhere in the package at `root`: `from m import _x` and
    `import m._x`, at module top or inside a function. Given as "file: module.name"."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                source = "." * node.level + (node.module or "")
                names = [f"{source}.{a.name}" for a in node.names if _is_private(a.name)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if any(map(_is_private, a.name.split(".")))]
            else:
                continue
            found += [f"{path.relative_to(root.parent).as_posix()}: {name}" for name in names]
    return found


def test_no_module_imports_a_private_name_from_another():
    """A name starting with `_` is its module's own: code another module needs gets a public
    name in the module of its concept (e.g. dpportal.releases.presentation, shared by the
    release pages and the API). Tests are exempt: they may reach into a module's private
    names to test or replace them (`monkeypatch.setattr(measure, "_sensitivity", ...)`)."""
    found = set()
    for package in PACKAGES:
        found.update(private_imports(REPO_ROOT / package))
    assert sorted(found) == []


def test_a_planted_private_import_is_found(tmp_path):
    """Guard for the test above: private names imported at the top, inside a function, by a
    relative import or as a submodule are found; dunder and public names are not."""
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("from planted.rules import __version__, visible\n")
    (package / "views.py").write_text(
        "from planted.rules import _owns, visible\n"
        "def page():\n    from .rules import _audit_filter\n"
        "import planted._helpers.io\n"
    )
    assert sorted(private_imports(package)) == [
        "planted/views.py: .rules._audit_filter",
        "planted/views.py: planted._helpers.io",
        "planted/views.py: planted.rules._owns",
    ]


FILE_WRITES = {"write_bytes", "write_text", "chmod", "mkstemp", "NamedTemporaryFile"}


def private_file_writes(root: Path) -> list[str]:
    """Calls that write or create a file other than through dpportal.core.files (os.open, open in a
    writing mode, Path.write_bytes/write_text, chmod, temp files)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            mode = node.args[1] if len(node.args) > 1 else None
            writes_open = (
                name == "open"
                and isinstance(mode, ast.Constant)
                and any(c in str(mode.value) for c in "wax+")
            )
            os_open = name == "open" and getattr(getattr(func, "value", None), "id", "") == "os"
            if name in FILE_WRITES or writes_open or os_open:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {name}")
    return found


def test_private_files_are_written_only_through_dpportal_files():
    found = [
        f
        for f in private_file_writes(REPO_ROOT / "dpportal")
        if not f.startswith("dpportal/core/files.py")
    ]
    assert found == []


def files_marking_database_outside(tests_root: Path, home: str = "dpportal") -> list[str]:
    """Test files outside tests/<home> that use the `database` marker. ./test.sh runs the
    SQLite pass on tests/dpportal only, so a database test anywhere else would silently miss it."""
    return sorted(
        str(path.relative_to(tests_root))
        for path in tests_root.rglob("*.py")
        if path.relative_to(tests_root).parts[0] != home
        and path != Path(__file__)  # this file names the marker to look for it
        and "mark.database" in path.read_text()
    )


def test_every_database_test_is_in_the_folder_the_sqlite_pass_runs():
    assert files_marking_database_outside(REPO_ROOT / "tests") == []


def test_a_database_test_elsewhere_is_found(tmp_path):
    """Guard for the test above: a planted database test outside tests/dpportal is named."""
    for folder in ("dpportal", "mechanisms"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_x.py").write_text("pytestmark = pytest.mark.database\n")
    assert files_marking_database_outside(tmp_path) == ["mechanisms/test_x.py"]
