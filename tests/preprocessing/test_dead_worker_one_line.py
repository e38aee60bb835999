"""Issue 34 item 5: a killed SDK worker ends the job with the same one line whichever part of Beam sees the death
first: the dead-worker watcher (preprocessing/dead_workers.py: "killed by SIGKILL") or the data plane ("Channel
closed prematurely", the race that made test_bad_inputs_dead_worker.py's message vary under load). The race is
played here without Beam's timing: a pipeline whose run fails with the data plane's error while the watcher
records the death a moment later, or before."""

from __future__ import annotations

import threading

import pytest

from preprocessing import dead_workers, runners
from preprocessing.config import RunnerConfig

KILLED = "a Beam SDK worker process (worker_0) died while the job ran (killed by SIGKILL)"


class _FailingPipeline:
    """Stands in for beam.Pipeline: run() fails as Beam's data plane fails when a worker's stream ends."""

    watcher_first = False

    def __init__(self, *args, **kwargs):
        pass

    def run(self):
        death = dead_workers.WorkerDied(dead_workers._message("worker_0", "killed by SIGKILL"))

        def watcher_sees_it():
            with dead_workers._deaths_lock:
                dead_workers._deaths.append(death)

        if self.watcher_first:
            watcher_sees_it()
        else:  # the data plane first: the watcher's thread reports the exit after the failure is raised
            threading.Timer(0.2, watcher_sees_it).start()
        raise RuntimeError("Pipeline failed: Channel closed prematurely.")


@pytest.mark.parametrize("watcher_first", [False, True], ids=["data-plane-first", "watcher-first"])
def test_the_same_line_whichever_sees_the_death_first(monkeypatch, watcher_first):
    monkeypatch.setattr(runners.beam, "Pipeline", type("P", (_FailingPipeline,), {"watcher_first": watcher_first}))
    with pytest.raises(dead_workers.WorkerDied) as err:
        runners.run_pipeline(lambda p: None, RunnerConfig(preset="in_process"), "documents")
    assert str(err.value).startswith(f"documents: {KILLED}; the job was stopped and nothing was published")


def test_without_a_watcher_in_this_process_the_data_planes_words_stay(monkeypatch):
    # a portable job's workers are watched in the job service's process: the driver has only the text
    class Portable(_FailingPipeline):
        def run(self):
            raise RuntimeError("Pipeline failed: Channel closed prematurely.")

    monkeypatch.setattr(runners.beam, "Pipeline", Portable)
    monkeypatch.setattr(runners, "DATA_PLANE_WAIT_S", 0.1)
    with pytest.raises(dead_workers.WorkerDied) as err:
        runners.run_pipeline(lambda p: None, RunnerConfig(preset="in_process"), "documents")
    assert "died while the job ran (its data channel closed in the middle of a bundle)" in str(err.value)
