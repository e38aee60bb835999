"""The Prefect server on PostgreSQL, the database production servers use (the cluster and server are started by
conftest.py): `bertfactory deploy --pool-setup --name ...` deploys prefect.yaml's process deployments, the weekly
schedule gets its upcoming runs, and a pipeline-local run executed by a worker completes; the rows are read back
from PostgreSQL itself.

The run reuses the run directory of the SQLite pipeline run with the same parameters, so every stage is up to
date and the run checks the orchestration (flow run, task runs, states, artifacts in PostgreSQL) in seconds.
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.slow  # real servers and pipeline runs


def test_deploy_schedule_and_run_on_postgres(postgres, postgres_server, pipeline_runs):
    server = postgres_server
    for name in ("pipeline/pipeline-local", "corpus_refresh/corpus-refresh-weekly"):
        assert server.deployment(name)["name"] == name.split("/")[1]
    assert postgres.sql("select count(*) from deployment") == "2"
    assert postgres.sql("select type from work_pool where name = 'bertfactory-process'") == "process"

    refresh = server.deployment("corpus_refresh/corpus-refresh-weekly")
    query = f"select count(*) from flow_run where deployment_id = '{refresh['id']}' and state_type = 'SCHEDULED'"
    deadline = time.monotonic() + 180  # a bound for a hang: the scheduler's runs are waited for
    while int(postgres.sql(query)) < 3 and time.monotonic() < deadline:
        time.sleep(1)
    assert int(postgres.sql(query)) >= 3

    flow_run_id = server.trigger("pipeline/pipeline-local", run_dir=str(pipeline_runs["run_dir"]),
                                 overrides=pipeline_runs["overrides"])
    output = server.work_once()
    run = server.flow_run(flow_run_id)
    assert run["state"]["type"] == "COMPLETED", f"{run['state']}\n{output[-6000:]}"
    assert postgres.sql(f"select state_type from flow_run where id = '{flow_run_id}'") == "COMPLETED"
    assert postgres.sql(f"select count(*) from task_run where flow_run_id = '{flow_run_id}' "
                        "and state_type = 'COMPLETED'") == "3"
    summaries = postgres.sql(f"select data #>> '{{}}' from artifact where flow_run_id = '{flow_run_id}' "
                             "and key like '%-summary' order by key")
    for stage in ("evaluate", "preprocess", "pretrain"):
        assert f"### {stage} — up-to-date" in summaries, summaries
