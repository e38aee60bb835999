"""Training never loads Apache Beam: the modules training/ imports from preprocessing (the shard reader, the masking
core for dynamic masking, the config sections) and training.data / training.pretrain themselves import without
apache_beam, checked in a fresh interpreter (a test process has Beam loaded already). Beam belongs to the
preprocessing pipelines only (preprocessing.documents, preprocessing.instance_pipeline, preprocessing.dedup)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# what a training job imports for sure, whatever training/ happens to import today
ALWAYS = ["training.data", "training.pretrain", "preprocessing.masking", "preprocessing.config",
          "preprocessing.shards"]

# imported one at a time; the first that loads apache_beam is reported by name
PROBE = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
    if "apache_beam" in sys.modules:
        print(json.dumps(name))
        break
else:
    print(json.dumps(None))
"""


def preprocessing_modules_imported_by_training() -> set[str]:
    """Every preprocessing module named by an import statement anywhere in training/ (top level or inside a
    function: dynamic masking imports the masker lazily)."""
    names: set[str] = set()
    for path in sorted((ROOT / "training").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module.split(".")[0] == "preprocessing":
                    names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names if a.name.split(".")[0] == "preprocessing")
    return names


def first_module_loading_beam(modules: list[str]) -> str | None:
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(modules)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, f"importing {modules} failed:\n{out.stderr[-3000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_training_imports_do_not_load_beam():
    found = preprocessing_modules_imported_by_training()
    assert "preprocessing.shards" in found  # the scan sees training's imports at all
    modules = ALWAYS + sorted(found - set(ALWAYS))
    culprit = first_module_loading_beam(modules)
    assert culprit is None, f"importing {culprit} loads apache_beam (imported in order: {modules})"


def test_the_probe_sees_beam_where_it_is_loaded():
    """The check itself can fail: the instances pipeline needs Beam, and the probe names it."""
    assert first_module_loading_beam(["preprocessing.masking", "preprocessing.instance_pipeline"]) == (
        "preprocessing.instance_pipeline")
