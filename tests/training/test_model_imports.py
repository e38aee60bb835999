"""No file-level import circle among the model modules (training/models/) and the Hugging Face interchange
(training/hf*.py): every import statement counts, a lazy one inside a function too, so that the registry lists the
members without the members importing it back."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_modules(path: Path, root: Path) -> set[str]:
    """Every module `path` imports (absolute names; `from X import y` counts X and X.y)."""
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _circles(files: list[Path], root: Path = ROOT) -> list[list[str]]:
    names = {_module_name(f, root): f for f in files}
    graph = {name: sorted(_imported_modules(f, root) & set(names) - {name}) for name, f in names.items()}
    circles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                circles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return circles


def test_the_model_modules_and_the_hf_interchange_have_no_import_circle():
    files = sorted((ROOT / "training" / "models").rglob("*.py")) + sorted((ROOT / "training" / "hf").rglob("*.py"))
    assert len(files) > 10
    assert _circles(files) == []


def test_the_check_finds_a_circle(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def f():\n    from .a import x\n")
    assert _circles([package / "a.py", package / "b.py"], tmp_path) == [["pkg.a", "pkg.b", "pkg.a"]]
