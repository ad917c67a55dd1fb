"""The project's packages import in one direction, eagle_infer <- eagle_train <- eval <- lab (a package imports its own
modules and those of the packages before it); inside each package its folders are floors that import downward only
(FLOORS); no circle between modules; and no module imports one of the project's modules inside a function (optional
third-party dependencies may stay lazy). Imports for type annotations only (under `if TYPE_CHECKING:`) count like any
other, so no circle or upward arrow can hide behind them. Scripts and tests may import anything."""
from __future__ import annotations

import ast
from pathlib import Path

from lab.module_map import FLOORS, LAYERS  # the order held here, and the one docs/design.md's map shows

ROOT = Path(__file__).resolve().parent.parent


def project_imports(path: Path, package: str, modules: set[str]) -> list[tuple[str, bool]]:
    """(imported project module as its dotted name, inside a function?) for every import statement in `path`, a
    module of package `package` (dotted, "eagle_infer.decoding"), nested ones too; `modules` are all the project's
    modules, to tell `from pkg import module` from `from pkg import name`."""
    tree, found = ast.parse(path.read_text()), []

    def module_of(dotted: str) -> str:  # the longest prefix that is a module (a name inside a module drops off)
        parts = dotted.split(".")
        while len(parts) > 1 and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts)

    def resolve(base: str, names: list[str]) -> list[str]:
        return [f"{base}.{n}" if f"{base}.{n}" in modules else module_of(base) for n in names]

    def visit(node, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # from .x import y / from ..a.x import y: relative to the module's package
                    anchor = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                if base.split(".")[0] in LAYERS:
                    found.extend((m, inner) for m in resolve(base, [a.name for a in child.names]))
            elif isinstance(child, ast.Import):
                found.extend((module_of(a.name), inner) for a in child.names if a.name.split(".")[0] in LAYERS)
            visit(child, inner)

    visit(tree, False)
    return found


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the layered packages under `root`, subpackages included, by dotted name (a package's
    __init__ by the package's name)."""
    found = {}
    for package in LAYERS:
        for p in sorted((root / package).rglob("*.py")):
            parts = p.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return found


def import_table(root: Path = ROOT) -> dict[str, list[tuple[str, bool]]]:
    modules = project_modules(root)
    return {name: project_imports(path, name if path.stem == "__init__" else name.rsplit(".", 1)[0], set(modules))
            for name, path in modules.items()}


def graph(table: dict[str, list[tuple[str, bool]]]) -> dict[str, set[str]]:
    return {name: {m for m, _ in found if m in table and m != name} for name, found in table.items()}


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


def upward_imports(table: dict[str, list[tuple[str, bool]]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a package imports a package after it in LAYERS."""
    layer = lambda module: LAYERS.index(module.split(".")[0])  # noqa: E731
    return [(name, m) for name, found in table.items() for m, _ in found if layer(m) > layer(name)]


def local_imports(table: dict[str, list[tuple[str, bool]]]) -> list[tuple[str, str]]:
    return [(name, m) for name, found in table.items() for m, nested in found if nested]


def floor(module: str) -> int:
    """The floor of a module within its package (FLOORS; 0 the top), -1 for the package's __init__; a module in a
    folder FLOORS does not name is an error (a new folder takes its place in FLOORS)."""
    parts = module.split(".")
    if len(parts) == 1:
        return -1
    floors = FLOORS[parts[0]]
    folder = parts[1] if len(parts) > 2 or parts[1] in floors and parts[1] else ""
    if folder not in floors:
        raise AssertionError(f"{module}: folder {folder!r} is not a floor of {parts[0]}: expected one of {floors}")
    return floors.index(folder)


def upward_floor_imports(table: dict[str, list[tuple[str, bool]]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs inside one package where a module imports a floor above its own."""
    same = lambda a, b: a.split(".")[0] == b.split(".")[0]  # noqa: E731
    return [(name, m) for name, found in table.items() for m, _ in found
            if same(name, m) and m != name and floor(m) < floor(name)]


def test_every_package_is_checked():
    packages = {name.split(".")[0] for name in project_modules()}
    assert packages == set(LAYERS) == set(FLOORS)
    assert {p.parent.name for p in ROOT.glob("*/__init__.py")} <= set(LAYERS) | {"tests", "scripts"}
    for name in project_modules():
        floor(name)  # every folder is a named floor


def test_floors_import_only_downward():
    assert not upward_floor_imports(import_table())


def test_no_import_circle_between_modules():
    cycle = find_cycle(graph(import_table()))
    assert cycle is None, " -> ".join(cycle)


def test_packages_import_only_downward():
    assert not upward_imports(import_table())


def test_no_function_local_import_of_the_project():
    assert not local_imports(import_table())


def test_the_checks_see_a_circle_an_upward_and_a_local_import(tmp_path):
    """The walker is not blind: a planted circle, an upward import and a function-local import are found."""
    for package in LAYERS:
        (tmp_path / package).mkdir()
    (tmp_path / "eval" / "a.py").write_text("from .b import x\n")
    (tmp_path / "eval" / "b.py").write_text("def f():\n    from eval.a import y\n")
    (tmp_path / "eagle_train" / "c.py").write_text("from eval import a\nfrom lab.d import z\n")
    (tmp_path / "lab" / "d.py").write_text("from eval import b\nif TYPE_CHECKING:\n    from eval.a import t\n")
    (tmp_path / "eagle_infer" / "sub").mkdir()
    (tmp_path / "eagle_infer" / "sub" / "e.py").write_text("from ..f import g\nfrom .h import i\nimport lab.d\n")
    (tmp_path / "eagle_infer" / "f.py").write_text("")
    (tmp_path / "eagle_infer" / "sub" / "h.py").write_text("")
    table = import_table(tmp_path)
    assert find_cycle(graph(table)) in (["eval.a", "eval.b", "eval.a"], ["eval.b", "eval.a", "eval.b"])
    assert local_imports(table) == [("eval.b", "eval.a")]
    assert table["eagle_infer.sub.e"] == [("eagle_infer.f", False), ("eagle_infer.sub.h", False), ("lab.d", False)]
    assert upward_imports(table) == [("eagle_infer.sub.e", "lab.d"), ("eagle_train.c", "eval.a"),
                                     ("eagle_train.c", "lab.d")]
    assert table["lab.d"] == [("eval.b", False), ("eval.a", False)]  # a type-only import counts


def test_the_floor_check_sees_an_upward_import_and_a_type_only_circle(tmp_path):
    """An upward import between eagle_infer's floors is found, a type-only one too, and a circle that closes only
    under `if TYPE_CHECKING:` is a circle."""
    for package in LAYERS:
        (tmp_path / package).mkdir()
    for folder in ("models", "decoding"):
        (tmp_path / "eagle_infer" / folder).mkdir()
    (tmp_path / "eagle_infer" / "models" / "cache.py").write_text("from ..decoding.cycle import step\n")
    (tmp_path / "eagle_infer" / "decoding" / "cycle.py").write_text(
        "from ..models.cache import c\nfrom .scheduler import r\n")
    (tmp_path / "eagle_infer" / "decoding" / "scheduler.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .cycle import step\n")
    (tmp_path / "eagle_infer" / "config.py").write_text("if TYPE_CHECKING:\n    from .models.cache import c\n")
    table = import_table(tmp_path)
    assert sorted(upward_floor_imports(table)) == [("eagle_infer.config", "eagle_infer.models.cache"),
                                                   ("eagle_infer.models.cache", "eagle_infer.decoding.cycle")]
    assert "eagle_infer.decoding.scheduler" in find_cycle(graph(
        {k: v for k, v in table.items() if k != "eagle_infer.models.cache"}))
