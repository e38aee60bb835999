"""docs/family.md's table (written by scripts/family_table.py): every member has a row, every cell of every row is
filled (no blank, lone dash, n/a, "not measured" or failed measurement), and the rows are the script's STATIC cells
(not edited by hand). The checker itself is tested on altered copies of the committed table: each kind of empty
cell, a missing row and a hand-edited row are reported, one line each, naming the member and the column. And
docs/family.md's "Adding a member" checklist, for every registered member (training/models/members.py): its folder,
its HF adapter or an explicit `no_hf`, a full recipe and its tiny twin, its docs rows."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "family_table.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("family_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


family_table = _load_script()
DOC_TEXT = (REPO / "docs" / "family.md").read_text(encoding="utf-8")


def _with_cell(text: str, member: str, column: str, value: str) -> str:
    """`text` with `member`'s cell in `column` replaced by `value`."""
    rows = family_table.table_rows(text)
    cells = list(rows[member])
    old_line = "| " + " | ".join(cells) + " |"
    cells[family_table.COLUMNS.index(column)] = value
    assert old_line in text
    return text.replace(old_line, "| " + " | ".join(cells) + " |")


def test_the_committed_table_has_every_members_row_with_every_cell_filled():
    rows = family_table.table_rows(DOC_TEXT)
    assert list(rows) == list(family_table.TWINS)
    assert family_table.table_problems(DOC_TEXT) == []
    modern = dict(zip(family_table.COLUMNS, rows["ModernBERT"]))
    assert "tiny-modernbert-long" in modern["recipe (full / tiny)"]
    assert "context extension to 8,192" in modern["paper's data setup (full recipe)"]


def test_the_check_command_passes_on_the_committed_table():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every cell filled" in proc.stdout


@pytest.mark.parametrize("value", ["", "-", "—", "n/a", "N/A", "— / —", "not measured",
                                   "failed: exit 1: Traceback (log runs/family/bert.log)"])
@pytest.mark.parametrize("member", ["ModernBERT", "BERT"])
def test_an_empty_cell_is_reported_naming_member_and_column(member, value):
    column = "HF import / export" if not value.startswith(("not", "failed")) else family_table.COLUMNS[-1]
    problems = family_table.table_problems(_with_cell(DOC_TEXT, member, column, value))
    assert f"{member}'s '{column}' cell is empty" in "\n".join(problems), problems


def test_a_dash_with_its_reason_or_beside_a_filled_half_is_filled():
    assert not family_table.empty_cell("— (transformers 5 has no Transformer-XL)")
    assert not family_table.empty_cell("— / BertForMaskedLM (SBO head left out)")
    assert family_table.empty_cell(" - / n/a ")


def test_a_missing_row_and_a_hand_edited_row_are_reported():
    rows = family_table.table_rows(DOC_TEXT)
    line = "| " + " | ".join(rows["XLNet"]) + " |\n"
    problems = family_table.table_problems(DOC_TEXT.replace(line, ""))
    assert problems == ["family.md: no row for XLNet"]
    edited = _with_cell(DOC_TEXT, "ModernBERT", "FSDP", "✓ by hand")
    assert family_table.table_problems(edited) == [
        "family.md: ModernBERT's row differs from STATIC in scripts/family_table.py; rewrite the table with "
        "--write-only"]


def test_a_table_rendered_without_runs_fails_the_check(tmp_path):
    # no results.json under the runs directory: every measured cell is "not measured"
    text = "\n".join(family_table.render_table(tmp_path, {}))
    problems = family_table.table_problems(text)
    assert len(problems) == len(family_table.TWINS)
    assert all(p.endswith("cell is empty ('not measured')") for p in problems)


def _recipes_by_objective() -> dict[str, list[str]]:
    """objective -> the recipes of configs/ that train it (the distillation configs are not recipes)."""
    from flows.recipe import load_recipe

    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "configs").glob("*.yaml")):
        if not path.stem.startswith("distill-"):
            found.setdefault(load_recipe(path).pretrain.objective, []).append(path.stem)
    return found


def test_every_registered_member_has_its_folder_hf_adapter_recipes_and_docs_rows():
    """docs/family.md's "Adding a member", checked for every member of training/models/members.py."""
    import ast

    from training import hf
    from training.models.members import MEMBERS

    recipes = _recipes_by_objective()
    rows = family_table.table_rows(DOC_TEXT)
    hf_cell = family_table.COLUMNS.index("HF import / export")
    for member in MEMBERS:
        # its folder: model.py (the ARCHITECTURE) and the torch-free settings.py holding this very row
        package = member.model.rpartition(".")[0]
        folder = REPO / package.replace(".", "/")
        assert member.model == f"{package}.model" and package.startswith("training.models."), member.name
        assert (folder / "model.py").is_file() and (folder / "__init__.py").is_file(), member.name
        assert importlib.import_module(f"{package}.settings").MEMBER is member, member.name
        # its HF adapter (the functions the table names), or why it has none, said in the table's HF cell too
        if member.hf is None:
            assert member.no_hf and member.no_hf in rows[member.name][hf_cell], member.name
        else:
            adapter = REPO / "training" / "hf" / f"{member.hf.adapter}.py"
            defined = {node.name for node in ast.parse(adapter.read_text(encoding="utf-8")).body
                       if isinstance(node, ast.FunctionDef)}
            named = {f for f in (member.hf.export, *(fn for _, fn in member.hf.imports)) if f}
            assert named and named <= defined, (member.name, sorted(named - defined))
            if member.hf.export:
                assert hf.EXPORTS[member.architecture].member is member, member.name
            assert all(hf.IMPORTS[model_type].member is member for model_type, _ in member.hf.imports), member.name
        # its recipes: a full one and its tiny twin (the family table's) train one of its objectives
        objectives = {info.name for info in member.objectives}
        trained = {stem for name in objectives for stem in recipes.get(name, [])}
        twin = Path(family_table.TWINS[member.name]).stem
        assert twin in trained and len(trained) >= 2, (member.name, sorted(trained))
        # its docs rows: the measured family table and the architecture table
        assert member.name in rows and f"`{member.architecture}`" in DOC_TEXT, member.name
