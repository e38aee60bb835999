"""The fixed cost of a small preprocessing job (issue 19): a local-preset job over a small input runs in the calling
process (no worker subprocesses) with byte-identical outputs; release_freed_memory does nothing while the process
has not grown; the langid model is read from its decompressed cache with the same arrays. The timings themselves
are in benchmarks/RESULTS.md (benchmarks/fixed_cost.py), not asserted here."""

import gc
from pathlib import Path

import numpy as np
import pytest
from apache_beam.runners.portability import local_job_service

from bertfactory.io import sha256_file
from preprocessing import memory
from preprocessing.config import RunnerConfig
from preprocessing.pipeline import run_preprocess
from preprocessing.runners import COMPRESSED_INPUT_FACTOR, describe, input_size, runner_for_input

MIB = 2**20


def test_runner_for_input_runs_small_local_jobs_in_process():
    local = RunnerConfig(preset="local", num_workers=2, in_process_below_mib=2.0)
    assert runner_for_input(local, 2 * MIB - 1).preset == "in_process"
    assert runner_for_input(local, 2 * MIB) == local
    never = local.model_copy(update={"in_process_below_mib": 0.0})
    assert runner_for_input(never, 0) == never
    portable = RunnerConfig(preset="portable")
    assert runner_for_input(portable, 0) == portable
    assert describe(local, 10)["ran_in_process"] is True and describe(local, 3 * MIB)["ran_in_process"] is False
    assert "ran_in_process" not in describe(local) and "in_process_below_mib" not in describe(portable, 0)


def test_raw_documents_packed_by_tokens_run_in_process_whatever_their_size():
    local = RunnerConfig(preset="local", num_workers=2, in_process_below_mib=2.0)
    assert runner_for_input(local, 100 * MIB, tokenizer_bound=True).preset == "in_process"
    assert runner_for_input(local, 100 * MIB) == local  # other jobs: the size rule alone
    off = local.model_copy(update={"in_process_tokenizer_bound": False})
    assert runner_for_input(off, 100 * MIB, tokenizer_bound=True) == off
    assert runner_for_input(off, MIB, tokenizer_bound=True).preset == "in_process"
    many = local.model_copy(update={"num_workers": 3})  # more workers: the size rule decides (not measured)
    assert runner_for_input(many, 100 * MIB, tokenizer_bound=True) == many
    assert runner_for_input(many, MIB, tokenizer_bound=True).preset == "in_process"
    never = local.model_copy(update={"in_process_below_mib": 0.0})  # 0 = always the workers, still
    assert runner_for_input(never, 0, tokenizer_bound=True) == never
    portable = RunnerConfig(preset="portable")
    assert runner_for_input(portable, 0, tokenizer_bound=True) == portable
    assert describe(local, 100 * MIB, tokenizer_bound=True)["ran_in_process"] is True
    assert describe(local, 100 * MIB)["ran_in_process"] is False
    assert describe(off, 100 * MIB, tokenizer_bound=True)["in_process_tokenizer_bound"] is False


def test_compressed_inputs_count_several_times_their_size():
    sources = [("a/pages.xml.bz2", MIB), ("gs://b/news.WARC.GZ", 10), ("c/text.txt", MIB)]
    assert input_size(sources) == COMPRESSED_INPUT_FACTOR * (MIB + 10) + MIB
    local = RunnerConfig(preset="local", in_process_below_mib=2.0)
    assert runner_for_input(local, input_size(sources[:1])) == local  # a 1 MiB dump is not a small job
    assert runner_for_input(local, input_size(sources[2:])).preset == "in_process"


def _tree(run_dir: Path) -> dict[str, str]:
    return {str(p.relative_to(run_dir)): sha256_file(p) for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name not in ("stats.json", "manifest.json")}


def test_small_input_starts_no_worker_and_matches_the_workers_bytes(tmp_path, wiki, monkeypatch):
    started = []
    start = local_job_service.SubprocessSdkWorker.run

    def recording_run(self):
        started.append(1)
        return start(self)

    monkeypatch.setattr(local_job_service.SubprocessSdkWorker, "run", recording_run)
    dump = wiki.write_dump(tmp_path / "tiny-pages-articles.xml.bz2", wiki.standard_pages())
    assert dump.stat().st_size * COMPRESSED_INPUT_FACTOR < 2 * MIB

    small = run_preprocess(wiki.corpus(dump), wiki.config(in_process_below_mib=2.0), tmp_path / "small")
    assert started == [] and small["runner"]["ran_in_process"] is True
    workers = run_preprocess(wiki.corpus(dump), wiki.config(in_process_below_mib=0), tmp_path / "workers")
    assert started and workers["runner"]["ran_in_process"] is False

    assert _tree(tmp_path / "small") == _tree(tmp_path / "workers") != {}
    assert {k: v for k, v in small.items() if k != "runner"} == {k: v for k, v in workers.items() if k != "runner"}
    assert small["runner"]["direct_running_mode"] == "multi_processing"  # the configured preset, as recorded


def test_release_freed_memory_waits_for_growth(monkeypatch):
    collections = []
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(1) or 0)
    rss = memory._rss_bytes()
    if rss is None:
        pytest.skip("no /proc/self/statm")
    monkeypatch.setattr(memory, "_rss_after_release", rss)
    memory.release_freed_memory()  # not grown since the last release: nothing to give back
    assert collections == []
    monkeypatch.setattr(memory, "_rss_after_release", rss - (memory.RELEASE_AFTER_GROWTH_MIB + 1) * MIB)
    memory.release_freed_memory()
    assert collections == [1] and memory._rss_after_release is not None


def test_langid_model_from_the_decompressed_cache_is_py3langids(tmp_path, monkeypatch):
    from py3langid.langid import MODEL_DIR, MODEL_FILE
    from py3langid.langid import LanguageIdentifier as Py3LangId

    from preprocessing import langid

    monkeypatch.setenv("BERTFACTORY_CACHE", str(tmp_path))
    cached = langid._model()
    files = list((tmp_path / "langid").iterdir())
    assert [f.name for f in files] == [f"py3langid-{sha256_file(MODEL_DIR / MODEL_FILE)[:16]}.npz"]
    again = langid._model()  # read back from the cache
    reference = Py3LangId.from_model_file(MODEL_FILE, norm_probs=True)
    for model in (cached, again):
        assert model.nb_classes == reference.nb_classes and model.tk_output == reference.tk_output
        assert model.tk_nextmove == reference.tk_nextmove and model.tk_row == reference.tk_row
        assert np.array_equal(model.nb_ptc, reference.nb_ptc) and np.array_equal(model.nb_pc, reference.nb_pc)
        assert model.classify("Tous les êtres humains naissent libres et égaux") == \
            reference.classify("Tous les êtres humains naissent libres et égaux")
