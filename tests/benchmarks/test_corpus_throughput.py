"""benchmarks/corpus_throughput.py: its pipeline setups are valid recipes (goal 1's token-packed row is the
ordinary pipeline with corpus.documents raw and instances.packing tokens), and `all` reports every goal against its
target, a missing goal-2 script as not measured, and goal 3 from fixed_cost.measure's medians."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def throughput(load_benchmark):
    return load_benchmark("corpus_throughput")


def test_every_pipeline_setup_is_a_valid_recipe(throughput):
    for name, overrides in throughput.PIPELINE_SETUPS.items():
        corpus, cfg = throughput.pipeline_configs(["sample:sotu"], ["preprocess.tokenizer.path=t.json", *overrides])
        assert cfg.tokenizer.path == "t.json", name
    corpus, cfg = throughput.pipeline_configs(["x"], throughput.PIPELINE_SETUPS[throughput.RAW_TOKENS])
    assert corpus.documents == "raw" and cfg.instances.format == "full-sentences"
    assert cfg.instances.packing == "tokens" and cfg.masking.dynamic
    _, in_process = throughput.pipeline_configs(["x"], throughput.PIPELINE_SETUPS[throughput.RAW_TOKENS_IN_PROCESS])
    assert in_process.runner.preset == "in_process" and in_process.instances == cfg.instances
    corpus, cfg = throughput.pipeline_configs(["x"], throughput.PIPELINE_SETUPS[throughput.RAW_SENTENCES])
    assert corpus.documents == "raw" and cfg.instances.packing == "sentences"
    assert set(throughput.GOAL1_SETUPS["small"]) | set(throughput.GOAL1_SETUPS["large"]) <= set(throughput.PIPELINE_SETUPS)


def test_all_reports_a_missing_full_work_and_the_fixed_cost(throughput, tmp_path, monkeypatch, capsys):
    class FixedCost:
        @staticmethod
        def measure(work: Path, repo: Path, setups: list[str], repeats: int) -> dict:
            assert setups == ["default", "given"] and repeats >= 3
            return {"bare": {"wall_s": 0.1, "cpu_s": 0.03, "fixed_wall_s": 0.0, "fixed_cpu_s": 0.0},
                    "default": {"wall_s": 4.2, "cpu_s": 3.1, "fixed_wall_s": 4.1, "fixed_cpu_s": 3.07},
                    "given": {"wall_s": 2.9, "cpu_s": 2.5, "fixed_wall_s": 2.8, "fixed_cpu_s": 2.47}}

    monkeypatch.setattr(throughput, "load_sibling", lambda name: FixedCost if name == "fixed_cost" else None)
    throughput.mode_all(tmp_path, "tokenizer.json", 2, 10, [2, 3])
    out = capsys.readouterr().out
    assert "benchmarks/full_work.py is missing: goal 2 not measured" in out
    assert "| 2 | full work: (datatrove + hf) / ours | not measured (full_work.py missing) | >= 1.2x | - |" in out
    assert "| 3 | fixed cost, setup default (wall; CPU 3.07 s) | 4.10 s | <= 3 s | no |" in out
    assert "| 3 | fixed cost, setup given (wall; CPU 2.47 s) | 2.80 s | <= 3 s | yes |" in out
    assert "=== goal 1" not in out


def test_fixed_cost_measure_returns_medians_minus_bare(load_benchmark, tmp_path, monkeypatch):
    fixed_cost = load_benchmark("fixed_cost")
    samples = {"bare": iter([(0.2, 0.05), (0.1, 0.03), (0.3, 0.04)]),
               "given": iter([(3.0, 2.0), (5.0, 2.4), (4.0, 2.2)])}

    def timed(cmd, repo):
        if "first" in str(cmd):  # the run that trains the tokenizer `given` uses
            (tmp_path / "first" / "tokenizer").mkdir(parents=True)
            (tmp_path / "first" / "tokenizer" / "tokenizer.json").write_text("{}")
            return 1.0, 1.0
        return next(samples["bare" if "import preprocessing" in cmd else "given"])

    monkeypatch.setattr(fixed_cost, "timed", timed)
    monkeypatch.setattr(fixed_cost, "write_input", lambda d: d)
    result = fixed_cost.measure(tmp_path, tmp_path, ["given"], 3)
    assert result["given"]["wall_s"] == 4.0 and result["given"]["cpu_s"] == 2.2
    assert result["given"]["fixed_wall_s"] == pytest.approx(3.8) and result["given"]["fixed_cpu_s"] == pytest.approx(2.16)


def test_rss_sampler_traces_the_process_tree_once_a_second(throughput, tmp_path):
    import subprocess
    import sys

    # a parent that allocates ~64 MiB in a child: the tree's trace must see the child's memory
    code = ("import subprocess, sys, time; subprocess.run([sys.executable, '-c', "
            "'import time; b = bytearray(64 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(1.6)'])")
    proc = subprocess.Popen([sys.executable, "-c", code])
    run_dir = tmp_path / "run"
    (run_dir / "a").mkdir(parents=True)
    (run_dir / "a" / "f.bin").write_bytes(b"x" * (3 << 20))
    sampler = throughput.TreeRssSampler(proc.pid, interval=0.05, trace_every=0.5, disk_dir=run_dir, disk_every=0.5)
    sampler.start()
    proc.wait()
    sampler.done.set()
    sampler.join()
    times = [point[0] for point in sampler.trace]
    assert len(times) >= 3 and times == sorted(times)
    assert all(point[1] >= point[2] and point[1] >= point[3] for point in sampler.trace)  # tree >= any process
    assert max(point[3] for point in sampler.trace) >= 64  # the child's bytearray, in MiB
    assert max(point[4] for point in sampler.trace) == 2
    assert len(sampler.disk_trace) >= 2 and sampler.disk_trace[0][1] == 3.0 and sampler.peak_disk_mib == 3.0


def test_rss_trace_is_written_as_json_and_a_plot(throughput, tmp_path):
    import json

    run = {"wall_s": 3.0, "peak_tree_rss_mib": 120.0, "rss_trace": [[0.0, 100.0, 60.0, 40.0, 3], [1.0, 120.0, 70.0, 50.0, 3]]}
    path = tmp_path / "trace.json"
    large = dict(run, wall_s=9.0, disk_trace=[[0.0, 1.0], [10.0, 2048.0]], peak_run_dir_mib=2048.0)
    throughput.write_rss_trace(path, {1: run, 10: large}, dedup=False, overrides=["a=b"], commit="abc1234")
    doc = json.loads(path.read_text())
    assert set(doc["runs"]) == {"1x", "10x"} and doc["runs"]["10x"]["wall_s"] == 9.0
    assert doc["trace_columns"][:2] == ["s", "tree_mib"] and doc["overrides"] == ["a=b"] and doc["commit"] == "abc1234"
    assert doc["runs"]["10x"]["peak_run_dir_mib"] == 2048.0
    assert path.with_suffix(".png").stat().st_size > 1000
