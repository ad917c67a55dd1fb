"""eagle_infer's modules import each other without a circle, and none imports a module of the package inside a
function (optional third-party dependencies may stay lazy)."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "eagle_infer"


def package_imports(path: Path) -> list[tuple[str, bool]]:
    """(imported eagle_infer module, inside a function?) for every import statement in `path`, nested ones too."""
    tree, found = ast.parse(path.read_text()), []

    def visit(node, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level == 1:  # from .x import y / from . import x
                    names = [base] if base else [a.name for a in child.names]
                    found.extend((n.split(".")[0], inner) for n in names)
                elif base.startswith("eagle_infer"):
                    rest = base.removeprefix("eagle_infer").lstrip(".")
                    names = [rest] if rest else [a.name for a in child.names]
                    found.extend((n.split(".")[0], inner) for n in names)
            elif isinstance(child, ast.Import):
                found.extend((a.name.split(".")[1], inner) for a in child.names if a.name.startswith("eagle_infer."))
            visit(child, inner)

    visit(tree, False)
    return found


def graph() -> dict[str, set[str]]:
    modules = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {name: {m for m, _ in package_imports(path) if m in modules} for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A list of modules forming an import circle (first = last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := walk(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (cycle := walk(start)):
            return cycle
    return None


def test_no_import_circle_in_eagle_infer():
    assert find_cycle(graph()) is None, " -> ".join(find_cycle(graph()))


def test_no_function_local_import_of_the_package():
    local = [(p.stem, m) for p in PACKAGE.glob("*.py") for m, nested in package_imports(p) if nested]
    assert not local, local


def test_the_checks_see_a_circle_and_a_local_import(tmp_path):
    """The walker is not blind: a planted circle and a function-local import are found."""
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import y\n")
    edges = {p.stem: {m for m, _ in package_imports(p)} for p in tmp_path.glob("*.py")}
    assert find_cycle(edges) in (["a", "b", "a"], ["b", "a", "b"])
    assert package_imports(tmp_path / "b.py") == [("a", True)]
