"""What a corpus_refresh flow run leaves in Prefect, read back through the API: its meaningful name, the
preprocessing stage's own progress lines in its log (forwarded by the flow itself, as in a worker-started run where
PREFECT_LOGGING_EXTRA_LOGGERS was not set), and its markdown and link artifacts."""

from __future__ import annotations

import logging
import shutil

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId
from prefect.logging.handlers import APILogHandler

from bertfactory.samples import sample_path
from flows.refresh import corpus_refresh


def test_a_refresh_run_has_its_name_stage_progress_logs_and_artifacts(tmp_path, tiny_recipe, monkeypatch):
    for name in ("preprocessing", "flows"):  # no Prefect handler on our loggers, as under `python -m prefect.engine`
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "handlers", [h for h in logger.handlers if not isinstance(h, APILogHandler)])
    watch = tmp_path / "news"
    watch.mkdir()
    shutil.copy(sample_path("sotu") / "1790_george_washington_n.txt", watch)
    config = tiny_recipe(tmp_path / "weekly.yaml", [watch])
    state = corpus_refresh(str(config), str(tmp_path / "corpus"), return_state=True)
    assert state.is_completed() and state.result()["version"] == 1
    APILogHandler().flush()
    run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(run_id).name == "corpus_refresh:weekly@corpus"
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
        artifacts = client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    lines = [(log.name, log.message) for log in logs]
    assert ("preprocessing.pipeline", "documents: 1 pages read, 1 kept {'train': 1, 'heldout': 0}, ") in [
        (n, m[:len("documents: 1 pages read, 1 kept {'train': 1, 'heldout': 0}, ")]) for n, m in lines]
    assert any(n == "flows" and "corpus version 1 written to" in m for n, m in lines)
    by_key = {a.key: a for a in artifacts}
    assert "| corpus version | 1 |" in by_key["corpus-refresh"].data
    manifest = (tmp_path / "corpus/corpora/v1/manifest.json").resolve().as_uri()
    assert by_key["corpus-refresh-manifest-json"].data == f"[corpora/v1/manifest.json]({manifest})"
