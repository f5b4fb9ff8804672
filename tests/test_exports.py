"""Each package's public face is complete, and nothing is imported through a module that does
not define it (issue 36: no shims).

As websockets' ``tests/test_exports.py``: a module that holds public names lists them in
``__all__`` (only names it defines), and a package's ``__init__`` is its face, whose ``__all__``
is exactly the union of its modules' (`streamcap._face` imports each on first use). Code,
tests and scripts import a name from the module that defines it, or from a face that lists
it; a face stays as light to import as the top one (`tests/test_layers.py`).

Read from the files (`ast`) where that is enough; what needs the names themselves runs in a
subprocess, so that this process's imports cannot hide an eager one.
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "streamcap"
#: streamcap's packages (a folder with an ``__init__.py``), each with its face
PACKAGES = sorted(p.parent.name for p in SRC.glob("*/__init__.py"))
#: what ``import streamcap`` must not load (`tests/test_layers.py`), nor a package's face
HEAVY = ("torch", "transformers", "sounddevice", "soxr", "av", "websockets", "ray", "numpy")


def _name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(SRC.rglob("*.py"))}


@functools.cache
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(encoding="utf-8"))


def _is_face(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


def _is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


@functools.cache
def _defined(module: str) -> frozenset[str]:
    """Names a module binds itself at its top level (def, class, assignment; also under a
    run-time ``if``/``try``), not by an import."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, ast.If) and not _is_type_checking(node):
                visit(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body + node.orelse + node.finalbody)

    visit(_tree(module).body)
    return frozenset(names)


def _assigned(module: str, name: str) -> ast.expr | None:
    for node in _tree(module).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return node.value
    return None


def _all(module: str) -> list[str] | None:
    """A module's ``__all__``, which must be a literal list (a face's may be computed)."""
    value = _assigned(module, "__all__")
    return None if value is None else list(ast.literal_eval(value))


def _face_table(package: str) -> dict[str, str]:
    """A lazy face's ``_EXPORTS``: name -> the defining module (relative to the package)."""
    value = _assigned(package, "_EXPORTS")
    return {} if value is None else dict(ast.literal_eval(value))


def _face_names(package: str) -> set[str]:
    """What may be imported from a face: its table, or its literal ``__all__``."""
    table = _face_table(package)
    if table:
        return set(table)
    value = _assigned(package, "__all__")
    return set(ast.literal_eval(value)) if value is not None else set()


def _submodules(package: str) -> list[str]:
    return [m for m in MODULES if m.rpartition(".")[0] == package]


# (a) a module's __all__ lists what it defines


def test_each_modules_all_lists_only_names_it_defines() -> None:
    alls = {m: names for m in MODULES if not _is_face(m) and (names := _all(m)) is not None}
    wrong = {m: sorted(set(names) - _defined(m)) for m, names in alls.items()}
    wrong = {m: names for m, names in wrong.items() if names}
    assert not wrong, f"in __all__, not defined there: {wrong}"
    twice = {m: names for m, names in alls.items() if len(set(names)) != len(names)}
    assert not twice, twice


# (b) a package's face is exactly the union of its modules' __all__


@pytest.mark.parametrize("package", PACKAGES)
def test_face_is_the_union_of_its_modules_all(package: str) -> None:
    pkg = f"streamcap.{package}"
    combined = [name for module in _submodules(pkg) for name in _all(module) or []]
    assert len(set(combined)) == len(combined), "a name in two modules' __all__"
    face = importlib.import_module(pkg).__all__  # a face is light (test below)
    own = set(face) & _defined(pkg)  # names the face defines itself (`cli.main`)
    assert sorted(face) == sorted({*combined, *own}), "the face and its modules disagree"

    # a lazy face's table says where each name is defined, and its TYPE_CHECKING block agrees
    table = _face_table(pkg)
    for module in _submodules(pkg):
        for name in _all(module) or []:
            assert table.get(name, module.rpartition(".")[2]) == module.rpartition(".")[2], name
    typed = {
        alias.asname or alias.name: node.module.removeprefix(f"{pkg}.")
        for block in _tree(pkg).body
        if _is_type_checking(block)
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    assert not table or typed == table, "the TYPE_CHECKING block and _EXPORTS disagree"

    # importing a submodule sets the package's attribute of that name: a face name may not be
    # one (`from streamcap.audio import resample` would give the module or the function)
    clashes = {name for name in face if f"{pkg}.{name}" in MODULES}
    assert not clashes, f"names of submodules too: {clashes}"


def _defining(package: str) -> dict[str, str]:
    """Each name of a face -> the module that defines it (the face itself for its own)."""
    where = {n: m for m in _submodules(package) for n in _all(m) or []}
    return {n: where.get(n, package) for n in importlib.import_module(package).__all__}


def test_every_face_name_resolves_to_its_defining_module() -> None:
    """Each name through the face is the defining module's object, also when that module was
    imported first; an unknown name raises AttributeError. In a subprocess: it imports
    everything (torch, the server, the harness)."""
    code = """if True:
    import importlib, json, sys
    bad = []
    for package, names in json.loads(sys.argv[1]).items():
        for name, module in names.items():
            defined = getattr(importlib.import_module(module), name)
            if getattr(importlib.import_module(package), name) is not defined:
                bad.append(f"{package}.{name} is not {module}.{name}")
        face = importlib.import_module(package)
        if not set(face.__all__) <= set(dir(face)):
            bad.append(f"{package}: dir() lacks names of __all__")
        if hasattr(face, "NoSuchName"):
            bad.append(f"{package}.NoSuchName resolves")
    print(json.dumps(bad))
    """
    faces = {f"streamcap.{p}": _defining(f"streamcap.{p}") for p in PACKAGES}
    run = subprocess.run(
        [sys.executable, "-c", code, json.dumps(faces)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == []


# (c) no import through a module that does not define the name


def _imports(path: Path) -> list[tuple[str, str, int]]:
    """``(module, name, line)`` of each ``from streamcap... import name`` in a file."""
    here = _name(path) if path.is_relative_to(SRC) else ""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = node.module or ""
        if node.level:  # relative: from the file's package
            base = here.split(".") if path.name == "__init__.py" else here.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            source = ".".join([*base, *([node.module] if node.module else [])])
        if source == "streamcap" or source.startswith("streamcap."):
            found += [(source, alias.name, node.lineno) for alias in node.names]
    return found


def test_nothing_is_imported_through_a_module_that_does_not_define_it() -> None:
    files = [
        p for folder in ("streamcap", "tests", "scripts") for p in (ROOT / folder).rglob("*.py")
    ]
    shims = []
    for path in files:
        for source, name, line in _imports(path):
            if source not in MODULES:
                continue  # not a module of this checkout (the interpreter reports it)
            allowed = _defined(source) | {m.rpartition(".")[2] for m in _submodules(source)}
            if _is_face(source):
                allowed |= _face_names(source)
            if name not in allowed:
                shims.append(f"{path.relative_to(ROOT)}:{line}: {name} from {source}")
    assert not shims, "import each name from the module that defines it:\n" + "\n".join(shims)


# (d) a face is as light to import as `import streamcap`


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_a_face_loads_nothing_heavy(package: str) -> None:
    pkg = f"streamcap.{package}"
    code = (
        f"import sys, {pkg}; "
        f"print([m for m in {HEAVY!r} if m in sys.modules]); "
        f"print(sorted(m for m in sys.modules if m.startswith('{pkg}.')))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    heavy, submodules = (ast.literal_eval(line) for line in run.stdout.splitlines()[-2:])
    assert heavy == [], f"import {pkg} loads {heavy}"
    if package != "cli":  # the command's face is its parser, which `streamcap` runs at once
        assert submodules == [], f"import {pkg} imports {submodules}: not lazy"
