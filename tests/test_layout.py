"""The package's layering: imports flow one way, from launch/ down to the base, with no cycles.

Every module under ``sgi_lab`` is parsed with `ast` (nothing is imported), and every import of
an ``sgi_lab`` module is checked, at the top of a file or inside a function alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import sgi_lab

PACKAGE = Path(sgi_lab.__file__).resolve().parent

# Lowest first. A module may import from its own layer or any layer below it, never above.
# envs (the game table, the environment factories) and base (files, paths, threads, errors)
# import nothing above them, so that the configs canonicalise a game name once. runs (run
# folders, status, checkpoints, stopping) needs only the configs' errors, so every stage may
# load a checkpoint or own a run folder. runtime (device, precision, CPU settings, CUDA graphs)
# sits below data: the population replay places its tensors by it. The probes (labels, linear
# readouts, probing one encoder) sit below train, so that pretraining can probe its encoder
# every N steps; loading encoders from runs and probe results as tables are analysis. metrics sits
# below train (evaluate scores its returns with metrics.hns); exploratory (the IDF curiosity
# agent that collects the Exploratory data, a training run) beside train; viz below analysis (the
# analysis models draw with viz figures). studies (the write-ups of studies) read runs through
# analysis; experiments (which write a study's report), the notebook API and launch sit on top.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("sgi_lab.envs", "sgi_lab.base"),
    ("sgi_lab", "sgi_lab.config", "sgi_lab.config_values", "sgi_lab.runs"),
    ("sgi_lab.runtime",),
    ("sgi_lab.data", "sgi_lab.nets", "sgi_lab.objectives", "sgi_lab.augment"),
    ("sgi_lab.metrics", "sgi_lab.probes"),
    ("sgi_lab.train", "sgi_lab.exploratory"),
    ("sgi_lab.viz",),
    ("sgi_lab.analysis",),
    ("sgi_lab.studies",),
    ("sgi_lab.experiments", "sgi_lab.notebook"),
    ("sgi_lab.launch",),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """``(line, module)`` of every sgi_lab module that ``name`` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from sgi_lab.x import y` imports sgi_lab.x.y when y is a module, else sgi_lab.x.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import sgi_lab.a.b` counts as sgi_lab.a.b
                target = target.rpartition(".")[0]
            if target and target.startswith("sgi_lab") and target != name:
                found.append((node.lineno, target))
    return found


def layer_of(name: str) -> int:
    """The layer of the longest prefix that names the module (a module named on its own may sit
    below its package)."""
    best = None
    for index, layer in enumerate(LAYERS):
        for prefix in layer:
            if name == prefix or (prefix != "sgi_lab" and name.startswith(prefix + ".")):
                if best is None or len(prefix) >= best[0]:
                    best = (len(prefix), index)
    if best is None:
        raise AssertionError(f"{name} is in no layer: add its package to LAYERS")
    return best[1]


GRAPH = {name: imported(name, path, set(modules())) for name, path in modules().items()}


def test_every_module_has_a_layer():
    for name in GRAPH:
        layer_of(name)


def test_no_import_climbs_up_a_layer():
    climbs = [
        f"{name}:{line} imports {target} ({LAYERS[layer_of(target)][0]} is above "
        f"{LAYERS[layer_of(name)][0]})"
        for name, edges in GRAPH.items()
        for line, target in edges
        if layer_of(target) > layer_of(name)
    ]
    assert not climbs, "\n".join(climbs)


def find_cycle(graph: dict[str, list[tuple[int, str]]]) -> list[str] | None:
    """One import cycle among the modules of ``graph``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for _, target in graph.get(node, []):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycles():
    cycle = find_cycle(GRAPH)
    assert cycle is None, " -> ".join(cycle)


@pytest.mark.parametrize(
    ("graph", "cyclic"),
    [
        ({"a": [(1, "b")], "b": [(1, "a")]}, True),
        ({"a": [(1, "b")], "b": [(1, "c")], "c": [(1, "a")]}, True),
        ({"a": [(1, "b")], "b": [(1, "c")], "c": []}, False),
    ],
)
def test_find_cycle(graph, cyclic):
    assert (find_cycle(graph) is not None) == cyclic


def test_imports_inside_functions_are_seen(tmp_path):
    source = tmp_path / "x.py"
    source.write_text("def f():\n    from sgi_lab.launch import cli\n")
    edges = imported("sgi_lab.x", source, set(modules()))
    assert edges == [(2, "sgi_lab.launch.cli")]


# Within data, the store's format sits below its reader, and the reader below its writer: a
# store is read without the writing code, and the format knows neither.
STORE_MODULES = ("sgi_lab.data.store_format", "sgi_lab.data.store", "sgi_lab.data.store_writer")


def test_the_store_format_reader_and_writer_import_downwards_only():
    for position, name in enumerate(STORE_MODULES):
        above = [
            target
            for _, target in GRAPH[name]
            if target.startswith("sgi_lab.data") and target not in STORE_MODULES[:position]
        ]
        assert not above, f"{name} imports {above}"


ROOT_MODULES = {"sgi_lab", "sgi_lab.config", "sgi_lab.config_values", "sgi_lab.__main__"}


def test_the_package_root_holds_the_configs_and_packages_only():
    loose = [
        name
        for name, path in modules().items()
        if path.parent == PACKAGE and path.name != "__init__.py" and name not in ROOT_MODULES
    ]
    assert not loose, f"modules at the sgi_lab/ root: {loose}; give each a package"


def _imports_sgi_lab(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == "sgi_lab" for alias in node.names)
    return isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sgi_lab"


def lazy_imports(path: Path) -> list[tuple[int, bool]]:
    """``(line, has_reason)`` of every import of an sgi_lab module inside a function: the reason
    is a comment on the line above the import, or above the run of imports it belongs to."""
    lines = path.read_text().splitlines()
    found = []
    for fn in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for block in ast.walk(fn):
            for field in ("body", "orelse", "finalbody"):
                body = getattr(block, field, None)
                if (
                    not isinstance(body, list)
                    or block is not fn
                    and isinstance(block, (ast.FunctionDef, ast.AsyncFunctionDef))
                ):
                    continue
                first = None  # the first statement of the current run of imports
                for node in body:
                    if not isinstance(node, (ast.Import, ast.ImportFrom)):
                        first = None
                        continue
                    first = first or node
                    if _imports_sgi_lab(node):
                        span = lines[max(first.lineno - 2, 0) : node.lineno - 1]
                        found.append((node.lineno, any("#" in line for line in span)))
    return found


def test_every_import_inside_a_function_says_why():
    unexplained = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in modules().values()
        for line, reason in lazy_imports(path)
        if not reason
    ]
    assert not unexplained, (
        "imports of sgi_lab inside functions without a one-line reason above them "
        "(move them to the top of the file, or say why not): " + ", ".join(unexplained)
    )


def test_a_lazy_import_without_a_reason_is_found(tmp_path):
    source = tmp_path / "x.py"
    source.write_text(
        "def f():\n    from sgi_lab.runs import folder\n\n\n"
        "def g():\n    # lazy: a reason\n    from sgi_lab.runs import folder\n"
    )
    assert lazy_imports(source) == [(2, False), (7, True)]


# -- sizes ---------------------------------------------------------------------------------------
# A module is read whole and a function at a glance: at most MAX_FILE_LINES and
# MAX_FUNCTION_LINES. The ones over it on 2026-11-29 are listed with their size then, as a
# ceiling: they may shrink (and leave the list once under the limit, which the test asks for),
# never grow; anything new over the limit fails.
MAX_FILE_LINES = 650
MAX_FUNCTION_LINES = 80
OVERSIZE_FILES: dict[str, int] = {}
OVERSIZE_FUNCTIONS = {
    "sgi_lab/launch/cli.py::build_parser": 157,
}


def sizes() -> tuple[dict[str, int], dict[str, int]]:
    """Every module's lines, and every function's (``path::name``), over the whole package."""
    files, functions = {}, {}
    for path in modules().values():
        rel = path.relative_to(PACKAGE.parent).as_posix()
        text = path.read_text()
        files[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                span = node.end_lineno - node.lineno + 1
                key = f"{rel}::{node.name}"
                functions[key] = max(span, functions.get(key, 0))
    return files, functions


@pytest.mark.parametrize(
    ("limit", "listed", "kind"),
    [
        (MAX_FILE_LINES, OVERSIZE_FILES, "files"),
        (MAX_FUNCTION_LINES, OVERSIZE_FUNCTIONS, "functions"),
    ],
)
def test_no_module_or_function_grows_past_its_limit(limit, listed, kind):
    found = sizes()[0 if kind == "files" else 1]
    over = {name: n for name, n in found.items() if n > limit}
    new = sorted(f"{name} ({n})" for name, n in over.items() if name not in listed)
    grown = sorted(
        f"{name} ({listed[name]} -> {n})" for name, n in over.items() if n > listed.get(name, n)
    )
    fixed = sorted(name for name in listed if found.get(name, 0) <= limit)
    assert not new, f"{kind} over {limit} lines: {new}; split them"
    assert not grown, f"{kind} over {limit} lines grew: {grown}; split them instead"
    assert not fixed, f"{fixed} are under {limit} lines now: take them off the list"
