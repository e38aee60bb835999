"""The pretraining stage keeps its shape: `pretrain()` tells the story of a run in at most 60 lines (the pieces live
in their own modules), and importing it loads neither the evaluation package nor matplotlib (the loss curve is
training/loss_curve.py, plotting only when called)."""

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_pretrain_reads_as_the_story_of_a_run():
    tree = ast.parse((REPO / "training" / "pretrain.py").read_text(encoding="utf-8"))
    (function,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "pretrain"]
    lines = function.end_lineno - function.lineno + 1
    assert lines <= 60, f"training/pretrain.py pretrain() has {lines} lines; move the detail into a named helper"


def test_importing_pretraining_loads_no_evaluation_and_no_matplotlib():
    probe = ("import sys, training.pretrain; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'evaluation', 'matplotlib', 'distillation'}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
