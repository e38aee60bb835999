"""docs/family.md's table (written by scripts/family_table.py): every member has a row, every cell of every row is
filled (no blank, lone dash, n/a, "not measured" or failed measurement), and the rows are the script's STATIC cells
(not edited by hand). The checker itself is tested on altered copies of the committed table: each kind of empty
cell, a missing row and a hand-edited row are reported, one line each, naming the member and the column."""

from __future__ import annotations

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
