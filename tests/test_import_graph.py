"""The import graph follows the data one way (docs/architecture.md): a static check over every .py of the six
packages, reading each `import` / `from ... import` in the file (at module level and inside functions alike, since
a lazy import is still a dependency).

(a) Layering: a package imports only the packages below it in LAYERS, never one above.
(b) No file-level circle: the module graph (each import resolved to the file it loads) has no strongly connected
    component of more than one file, and no file imports itself.
(c) Light entry points, in a fresh process: loading and validating a recipe, and `bertfactory preprocess
    --no-prefect` up to the call of run_preprocess, import neither torch nor Prefect nor transformers (the model
    and objective declarations a recipe checks are torch-free modules: training/models/<member>/settings.py,
    training/models/members.py and the schemas in training/models/core/ (config_schema.py, member.py,
    capabilities.py, flops_terms.py); the CLI's HF table is training/hf/__init__.py; the plain stage logic is
    flows/stage_runner.py).

Run: `.venv/bin/python -m pytest -q tests/test_import_graph.py`.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# bottom first: the order the data flows (corpora -> shards -> a pretrained model -> its scores -> the students
# measured by those scores -> the flows that run all of them)
LAYERS = ("bertfactory", "preprocessing", "training", "evaluation", "distillation", "flows")


def module_files(root: Path = REPO, packages: tuple[str, ...] = LAYERS) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the packages (a package's name maps to its __init__.py)."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of `from <level dots><name> import ...` written in `module`."""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([name] if name else []))


def imported_modules(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `path` imports anywhere in its body. `from P import X` depends on P.X when X is
    a module of its own, else on P (X is a name P defines). The parents' __init__.py that Python runs on the way
    are not counted: a package's __init__ may gather its own modules (training/objectives/) without that being a
    circle of the code's own making."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, is_package, node.level, node.module) if node.level else node.module
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in known else source)
    # `import a.b.c` of a name we do not know (a class path, a typo) counts as its nearest known ancestor
    resolved = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target:
            resolved.add(target)
    return resolved


def import_graph(root: Path = REPO) -> tuple[dict[str, Path], dict[str, set[str]]]:
    known = module_files(root)
    return known, {module: imported_modules(module, path, known) for module, path in known.items()}


def layering_violations(graph: dict[str, set[str]], known: dict[str, Path]) -> list[str]:
    rank = {package: i for i, package in enumerate(LAYERS)}
    problems = []
    for module, targets in sorted(graph.items()):
        own = module.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if rank[other] > rank[own]:
                problems.append(f"{known[module].relative_to(REPO)} ({own}) imports {target} ({other}, a layer above)")
    return problems


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (a deep import chain must not hit Python's recursion limit)."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = lowlink[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = lowlink[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    lowlink[node] = min(lowlink[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
            if lowlink[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    return [component for component in strongly_connected_components(graph)
            if len(component) > 1 or component[0] in graph[component[0]]]


def test_every_package_imports_only_the_layers_below_it():
    known, graph = import_graph()
    problems = layering_violations(graph, known)
    assert not problems, "imports against the layering " + " -> ".join(LAYERS) + ":\n" + "\n".join(problems)


def test_no_file_level_import_cycle():
    known, graph = import_graph()
    cycles = import_cycles(graph)
    described = []
    for cycle in cycles:
        members = set(cycle)
        files = ", ".join(str(known[m].relative_to(REPO)) for m in cycle)
        edges = "; ".join(f"{m} -> {', '.join(sorted(graph[m] & members))}" for m in cycle)
        described.append(f"circle of {len(cycle)} files: {files}\n  edges: {edges}")
    assert not cycles, f"{len(cycles)} import circle(s):\n" + "\n".join(described)


def test_the_checks_find_what_they_look_for():
    """The checks themselves, on a hand-made graph: a circle of two, a self-import, an import upwards."""
    graph = {"training.a": {"training.b"}, "training.b": {"training.a", "bertfactory.x"}, "bertfactory.x": set(),
             "flows.y": {"flows.y"}, "preprocessing.z": {"evaluation.w"}, "evaluation.w": set()}
    assert sorted(import_cycles(graph)) == [["flows.y"], ["training.a", "training.b"]]
    known = {name: REPO / (name.replace(".", "/") + ".py") for name in graph}
    problems = layering_violations(graph, known)
    assert len(problems) == 1 and "preprocessing/z.py (preprocessing) imports evaluation.w" in problems[0]


def test_relative_imports_resolve_to_their_files(tmp_path):
    package = tmp_path / "training" / "inner"
    package.mkdir(parents=True)
    (tmp_path / "training" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from .b import thing\n")
    (package / "a.py").write_text("def lazy():\n    from ..top import helper\n    from . import b\n")
    (package / "b.py").write_text("import training.inner.a\n")
    (tmp_path / "training" / "top.py").write_text("")
    known = module_files(tmp_path, ("training",))
    graph = {module: imported_modules(module, path, known) for module, path in known.items()}
    assert graph["training.inner"] == {"training.inner.b"}
    assert graph["training.inner.a"] == {"training.top", "training.inner.b"}
    assert import_cycles(graph) == [["training.inner.a", "training.inner.b"]]


# the heavy libraries a light entry point must not load (torch: ~2-3 s of imports; Prefect: ~1-2 s)
HEAVY = ("torch", "prefect", "transformers")
_LOADED_HEAVY = f"sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})"

LOAD_RECIPE = f"""
import json, sys
from flows.recipe import load_recipe
recipe = load_recipe("configs/local.yaml")
assert recipe.model.hidden_size > 0
print("HEAVY " + json.dumps({_LOADED_HEAVY}))
"""

# `bertfactory preprocess --no-prefect ...` through the CLI's main, with run_preprocess replaced by a probe that
# reports what is loaded at the moment the stage would start
PREPROCESS_CLI = f"""
import json, sys
import preprocessing.pipeline

def probe(corpus, preprocess, run_dir):
    print("HEAVY " + json.dumps({_LOADED_HEAVY}))
    return {{}}

preprocessing.pipeline.run_preprocess = probe
from flows.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _heavy_modules_loaded(script: str, *args: str, cwd: Path) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    reports = [line for line in run.stdout.splitlines() if line.startswith("HEAVY ")]
    assert len(reports) == 1, f"the probe did not run once:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    return json.loads(reports[0][len("HEAVY "):])


def test_loading_a_recipe_imports_neither_torch_nor_prefect(tmp_path):
    assert _heavy_modules_loaded(LOAD_RECIPE, cwd=tmp_path) == []


def test_preprocess_without_prefect_imports_neither_torch_nor_prefect(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("A first sentence of the document. And a second one.\n", encoding="utf-8")
    loaded = _heavy_modules_loaded(PREPROCESS_CLI, "preprocess", "--no-prefect", "--input", "in", "--format", "text",
                                   "--vocab-size", "500", "--out", "run", cwd=tmp_path)
    assert loaded == []
