"""scripts/readme_demo.py: the README's demo excerpt is written from a run directory's stamps and summary table,
and refused when the run cannot be traced to one clean commit. flows/stamps.py records what it needs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from flows import stamps

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_demo", REPO / "scripts" / "readme_demo.py")
readme_demo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme_demo)

CLEAN = {"version": "0.1.0", "commit": "0123456789abcdef0123456789abcdef01234567", "dirty": False}
XEON = {"cpu": "Intel(R) Xeon(R) Processor", "vendor": "GenuineIntel", "cpus": 2, "isa": ["avx2", "avx512f", "amx"],
        "arch": "x86_64", "kernels": "avx2"}
EPYC = {"cpu": "AMD EPYC 7B13 64-Core Processor", "vendor": "AuthenticAMD", "cpus": 2, "isa": ["avx2"],
        "arch": "x86_64", "kernels": "avx2"}


def _demo_run(tmp_path: Path, monkeypatch, code=CLEAN, seconds=(21.0, 230.5, 300.0), machines=(XEON,) * 3) -> Path:
    """A finished demo run's stamps; a machine of None plays a stamp of an earlier bertfactory (no "machine")."""
    run = tmp_path / "run"
    (run / "pretrain").mkdir(parents=True)
    (run / "pretrain/metrics.jsonl").write_text(json.dumps({"step": 1200, "loss": 4.25, "mlm_loss": 4.25}) + "\n")
    monkeypatch.setattr(stamps, "code_revision", lambda: code)
    for stage, took, machine in zip(readme_demo.STAGES, seconds, machines):
        monkeypatch.setattr(stamps, "machine_description", lambda: machine)
        stamps.finish(run, stage, f"key-{stage}", {"stage": stage}, took)
        if machine is None:
            path = run / ".bertfactory" / f"{stage}.json"
            old = json.loads(path.read_text())
            del old["machine"]
            path.write_text(json.dumps(old))
    return run


def test_finish_records_duration_time_code_and_machine(tmp_path, monkeypatch):
    run = _demo_run(tmp_path, monkeypatch)
    stamp = stamps.recorded_run(run, "pretrain")
    assert stamp["seconds"] == 230.5 and stamp["code"] == CLEAN and stamp["finished_at"].startswith("20")
    assert stamp["machine"] == XEON
    assert stamps.recorded_summary(run, "pretrain") == {"stage": "pretrain"}
    assert stamps.recorded_run(run, "distill") == {}


def test_the_excerpt_names_commit_durations_and_the_printed_table(tmp_path, monkeypatch):
    run = _demo_run(tmp_path, monkeypatch)
    block = readme_demo.excerpt(run)
    assert block.startswith(readme_demo.BEGIN) and block.endswith(readme_demo.END)
    assert "at commit 0123456 on " in block
    assert " (2 cores, Intel(R) Xeon(R) Processor (GenuineIntel, AVX-512 + AMX)): preprocess 21 s" in block
    assert "preprocess 21 s, pretrain 3.8 min, evaluate 5.0 min; 9.2 min in all." in block
    assert "pretrain  final mlm_loss" in block and "4.2500" in block and "1,200" in block


@pytest.mark.parametrize("machines, named", [
    ((None,) * 3, "(machine not recorded): preprocess 21 s"),
    ((EPYC, EPYC, EPYC), "(2 cores, AMD EPYC 7B13 64-Core Processor (AuthenticAMD, AVX2)): preprocess 21 s"),
    ((XEON, EPYC, EPYC), "(preprocess on 2 cores, Intel(R) Xeon(R) Processor (GenuineIntel, AVX-512 + AMX); "
                         "pretrain, evaluate on 2 cores, AMD EPYC 7B13 64-Core Processor (AuthenticAMD, AVX2)): "
                         "preprocess 21 s"),
    ((None, XEON, XEON), "(preprocess on machine not recorded; pretrain, evaluate on 2 cores, Intel(R) Xeon(R) "
                         "Processor (GenuineIntel, AVX-512 + AMX)): preprocess 21 s"),
])
def test_the_line_names_the_machine_each_stage_ran_on(tmp_path, monkeypatch, machines, named):
    run = _demo_run(tmp_path, monkeypatch, machines=machines)
    line = readme_demo.provenance_line(run)
    assert line.startswith("Measured by `make demo` at commit 0123456 on 20") and named in line, line
    assert "(2 cores):" not in line


def test_write_then_check_and_a_changed_run_fails_the_check(tmp_path, monkeypatch, capsys):
    run = _demo_run(tmp_path, monkeypatch)
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n\n{readme_demo.BEGIN}\nstale figures\n{readme_demo.END}\n\nrest\n")
    assert readme_demo.main([str(run), "--readme", str(readme), "--check"]) == 1
    assert readme_demo.main([str(run), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "stale figures" not in text and text.startswith("intro\n\n") and text.endswith("\n\nrest\n")
    assert readme_demo.main([str(run), "--readme", str(readme), "--check"]) == 0
    (run / "pretrain/metrics.jsonl").write_text(json.dumps({"step": 1200, "loss": 4.5, "mlm_loss": 4.5}) + "\n")
    assert readme_demo.main([str(run), "--readme", str(readme), "--check"]) == 1
    assert "is not" in capsys.readouterr().err


@pytest.mark.parametrize("code, match", [
    ({**CLEAN, "dirty": True}, "uncommitted changes"),
    ({**CLEAN, "commit": None}, "different or unknown commits"),
])
def test_untraceable_runs_are_refused(tmp_path, monkeypatch, code, match):
    run = _demo_run(tmp_path, monkeypatch, code=code)
    with pytest.raises(readme_demo.ExcerptError, match=match):
        readme_demo.excerpt(run)


def test_an_unfinished_run_and_a_readme_without_the_block_are_refused_in_one_line(tmp_path, monkeypatch, capsys):
    run = _demo_run(tmp_path, monkeypatch)
    (run / ".bertfactory/evaluate.json").unlink()
    readme = tmp_path / "README.md"
    readme.write_text(f"{readme_demo.BEGIN}\n{readme_demo.END}\n")
    assert readme_demo.main([str(run), "--readme", str(readme)]) == 2
    assert "evaluate have not finished" in capsys.readouterr().err
    readme.write_text("no block\n")
    stamps.finish(run, "evaluate", "key", {}, 1.0)
    assert readme_demo.main([str(run), "--readme", str(readme)]) == 2
    assert "no demo excerpt block" in capsys.readouterr().err


def test_the_readme_has_exactly_one_excerpt_block():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert text.count(readme_demo.BEGIN) == 1 and text.count(readme_demo.END) == 1
    assert text.index(readme_demo.BEGIN) < text.index(readme_demo.END)
