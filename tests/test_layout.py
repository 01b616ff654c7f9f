"""The layout rules of docs/design.md ("Layout"), read from the source with the standard library's ``ast``:
imports run downward (no circle, function-level imports counted), no ``_private`` name crosses a part,
and a function-level import is a deferred optional or slow library with a comment that says so."""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

import pytest

import nnrecover

ROOT = pathlib.Path(nnrecover.__file__).resolve().parent
PAPERS = ("awasthi2021", "ge2019", "bakshi2019", "goel2019")
#: libraries a function may import (optional extras, or slow to import), each with a "deferred" comment
DEFERRABLE = {"scipy", "sklearn", "pandas", "matplotlib", "dask", "distributed", "tqdm", "threadpoolctl", "tensorly",
              "torch", "onnx", "onnxruntime", "skops", "safetensors", "pyarrow", "fpylll"}
#: nnrecover modules that defer other nnrecover modules, and which: the command line keeps ``--help`` fast
#: and the moment route of extraction does not load scikit-learn for the critical-point route
DEFERRING = {"nnrecover.cli.commands": {"nnrecover.learners", "nnrecover.assumptions", "nnrecover.experiments",
                                        "nnrecover.experiments.compare", "nnrecover.experiments.runner",
                                        "nnrecover.metrics"},
             "nnrecover.extraction.moments": {"nnrecover.learners"}}


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


MODULES = _modules()


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _part(module: str) -> str:
    names = module.split(".")
    if len(names) >= 3 and names[1] == "learners" and names[2] in PAPERS:
        return ".".join(names[:3])
    return ".".join(names[:2])


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _imports():
    """(module, target module, imported name or None, line, inside a function, the source line and the one above)."""
    for module, (path, is_package) in MODULES.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        tree = ast.parse(text)
        skip = _type_checking_nodes(tree)
        in_function = set()
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                in_function.update(id(n) for n in ast.walk(fn) if n is not fn)
        for node in ast.walk(tree):
            if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            context = "\n".join(lines[max(node.lineno - 2, 0):node.lineno])
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield module, alias.name, None, node.lineno, id(node) in in_function, context
                continue
            target = _absolute(module, is_package, node)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (module, sub if sub in MODULES else target, alias.name, node.lineno, id(node) in in_function,
                       context)


IMPORTS = list(_imports())


def _circles() -> list[list[str]]:
    graph = defaultdict(set)
    for module, target, _, _, _, _ in IMPORTS:
        while target not in MODULES and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in MODULES and target != module:
            graph[module].add(target)
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(MODULES):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_the_layout_of_the_design_notes():
    for package in ("data", "moments", "hermite", "tensor", "refine", "learners", "extraction", "experiments", "cli"):
        assert f"nnrecover.{package}" in MODULES, package
    for paper in PAPERS:
        assert f"nnrecover.learners.{paper}" in MODULES and f"nnrecover.learners.{paper}.estimator" in MODULES
    assert "nnrecover.evidence" in MODULES and "nnrecover.assumptions" in MODULES


def test_no_import_circle_among_the_modules():
    assert _circles() == []


def test_no_private_name_crosses_a_part():
    crossing = [(m, t, name, line) for m, t, name, line, _, _ in IMPORTS
                if name and name.startswith("_") and not name.startswith("__") and t.startswith("nnrecover")
                and _part(t) != _part(m)]
    assert crossing == []


def test_function_level_imports_are_deferred_libraries_with_a_comment():
    bad = []
    for module, target, _, line, in_function, context in IMPORTS:
        if not in_function:
            continue
        root = target.split(".")[0]
        allowed = root in DEFERRABLE or (root == "nnrecover" and any(
            target == t or target.startswith(t + ".") for t in DEFERRING.get(module, ())))
        if not allowed or "deferred" not in context:
            bad.append(f"{module}:{line} imports {target}")
    assert bad == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_star_import_and_no_re_exporting_alias_module(module):
    tree = ast.parse(MODULES[module][0].read_text(encoding="utf-8"))
    assert not any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names) for n in ast.walk(tree))
