"""The rooms of the code stay clear: what each folder may import, no import cycles,
no private names used across modules.

Every package folder under planner/ and models/ has a README.md of three lines:
what lives there, and on the third line ``May import:`` followed by the rooms it
may import, each in backquotes. A room is a package folder; ``planner`` stands for
the modules of planner/ itself (``plan()``, ``trap.py``), any other room also
covers the folders below it. A module may always import its own room; an entry
point (``__main__.py``) may import anything. Imports are read with ``ast``,
inside functions too, so a lazy import cannot hide a cycle or a forbidden edge.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("planner", "models")


@cache
def _modules() -> dict[str, Path]:
    """Every module of the project: dotted name -> file (cli.py too)."""
    out = {"cli": ROOT / "cli.py"}
    for top in PACKAGES:
        for f in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" in f.parts:
                continue
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = f
    return out


def _package_dirs() -> list[Path]:
    return sorted({f.parent for f in _modules().values() if f.name == "__init__.py"})


def _room_of_dir(d: Path) -> str:
    return ".".join(d.relative_to(ROOT).parts)


def _room(module: str) -> str:
    """The room of a module: its nearest package folder (``cli`` for cli.py)."""
    f = _modules()[module]
    return "cli" if module == "cli" else _room_of_dir(f.parent)


@cache
def _imports(module: str) -> frozenset[tuple[str, int]]:
    """The project's modules that ``module`` imports, with the line (packages count
    as their ``__init__``; ``from pkg import mod`` as the module)."""
    mods = _modules()
    f = mods[module]
    pkg = module if f.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for n in ast.walk(ast.parse(f.read_text(), str(f))):
        if isinstance(n, ast.Import):
            for a in n.names:
                name = a.name
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                if name:
                    out.add((name, n.lineno))
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                up = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                base = ".".join(up + ([n.module] if n.module else []))
            for a in n.names:
                if f"{base}.{a.name}" in mods:
                    out.add((f"{base}.{a.name}", n.lineno))
                elif base in mods:
                    out.add((base, n.lineno))
    return frozenset((m, line) for m, line in out if m != module)


def _readme(d: Path) -> list[str]:
    return (d / "README.md").read_text().splitlines()


def _allowed(d: Path) -> list[str]:
    """The rooms the third line of folder ``d``'s README allows."""
    return re.findall(r"`([A-Za-z_][\w.]*)`", _readme(d)[2])


def _may(allowed: list[str], own: str, target: str) -> bool:
    if target == own:
        return True
    for a in allowed:
        if target == a or (a != "planner" and target.startswith(a + ".")):
            return True
    return False


@pytest.mark.parametrize("folder", [_room_of_dir(d) for d in _package_dirs()])
def test_every_folder_says_in_three_lines_what_lives_there_and_what_it_may_import(
        folder: str) -> None:
    d = ROOT / folder.replace(".", "/")
    assert (d / "README.md").is_file(), f"{folder}: no README.md"
    lines = _readme(d)
    assert len(lines) == 3 and all(x.strip() for x in lines), (
        f"{folder}/README.md: three lines (what lives there, in a heading and a line; "
        f"then 'May import: ...'), not {len(lines)}")
    assert lines[0].startswith(f"# {folder.replace('.', '/')}"), (
        f"{folder}/README.md: the first line is a heading naming the folder")
    assert lines[2].startswith("May import:"), f"{folder}/README.md: third line 'May import:'"
    rooms = {_room_of_dir(x) for x in _package_dirs()} | {"cli"}
    for a in _allowed(d):
        # a room that does not exist yet may be named (planner.tune, while it is made)
        assert a in rooms or a.startswith("planner."), f"{folder}/README.md: unknown room {a}"


def test_each_folder_imports_only_what_its_readme_allows() -> None:
    wrong = []
    allowed = {_room_of_dir(d): _allowed(d) for d in _package_dirs()
               if (d / "README.md").is_file()}
    allowed["cli"] = [r for r in allowed]  # the entry point of the command line
    for m in _modules():
        if m.endswith("__main__"):
            continue  # an entry point runs what it must
        own = _room(m)
        for target, line in sorted(_imports(m)):
            room = _room(target)
            if own in allowed and not _may(allowed[own], own, room):
                wrong.append(f"{_modules()[m].relative_to(ROOT)}:{line}: {m} imports "
                             f"{target}, which {own}'s README does not allow")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or around a loop (Tarjan's strongly
    connected components)."""
    graph = {m: sorted({t for t, _line in _imports(m)}) for m in _modules()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # iterative enough for this graph's depth
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_verifier_imports_nothing_of_the_planner() -> None:
    """verify.py checks plans independently: it reads the contract (models) only."""
    got = sorted(t for t, _line in _imports("planner.checks.verify") if not t.startswith("models"))
    assert not got, f"planner/checks/verify.py imports {got}"


def _defined_names(tree: ast.AST) -> set[str]:
    """Names a module defines: functions, classes, assigned names and attributes."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            out.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
    return out


def test_no_private_names_across_modules() -> None:
    """A module uses another module's public API: it imports no ``_name`` of the
    project, reaches no ``obj._name`` that only another module defines, and a subclass
    calls no ``self._name`` that only its base class's module defines."""
    trees = {m: ast.parse(f.read_text(), str(f)) for m, f in _modules().items()}
    defined = {m: _defined_names(t) for m, t in trees.items()}
    elsewhere: dict[str, set[str]] = {}
    for m, names in defined.items():
        for name in names:
            elsewhere.setdefault(name, set()).add(m)
    wrong = []
    for m, tree in trees.items():
        where = _modules()[m].relative_to(ROOT)
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in PACKAGES:
                wrong += [f"{where}:{n.lineno}: imports {n.module}.{a.name}" for a in n.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
            if not (isinstance(n, ast.Attribute) and n.attr.startswith("_")
                    and not n.attr.startswith("__")):
                continue
            if n.attr in defined[m] or n.attr not in elsewhere:
                continue  # its own, or not the project's (argparse._SubParsersAction, ...)
            wrong.append(f"{where}:{n.lineno}: {ast.unparse(n)} is private to "
                         f"{', '.join(sorted(elsewhere[n.attr]))}")
    assert not wrong, "\n".join(wrong)
