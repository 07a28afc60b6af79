"""How many functions of each package carry type annotations (issue 42, item 5).

    python scripts/annotation_share.py [PACKAGE ...]      (default: dpportal mechanisms)

Reads the source with `ast` (migrations left out) and counts every `def` and `async def`,
methods and nested functions included. "Some" annotation makes mypy treat a function as typed;
"complete" means every parameter (but self and cls) and the return value are annotated.
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def annotations(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[bool, bool]:
    """Say whether the function has some annotation, and whether it is completely annotated."""
    arguments = function.args
    parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    parameters += [p for p in (arguments.vararg, arguments.kwarg) if p is not None]
    if parameters and parameters[0].arg in ("self", "cls"):
        parameters = parameters[1:]
    annotated = [p.annotation is not None for p in parameters]
    returns = function.returns is not None
    return returns or any(annotated), returns and all(annotated)


def count(package: str) -> tuple[int, int, int]:
    """Count the package's functions: all, with some annotation, completely annotated."""
    functions = some = complete = 0
    for path in sorted((ROOT / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                has_some, has_all = annotations(node)
                functions += 1
                some += has_some
                complete += has_all
    return functions, some, complete


def main(packages: list[str]) -> None:
    """Print one row per package: its functions and the share annotated."""
    print(f"{'package':<12} {'functions':>9} {'some':>6} {'share':>6} {'complete':>9} {'share':>6}")
    for package in packages:
        functions, some, complete = count(package)
        print(
            f"{package:<12} {functions:>9} {some:>6} {some / functions:>6.0%}"
            f" {complete:>9} {complete / functions:>6.0%}"
        )


if __name__ == "__main__":
    main(sys.argv[1:] or ["dpportal", "mechanisms"])
