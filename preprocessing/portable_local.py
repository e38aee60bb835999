"""Beam's portable path on one machine: a local job service plus N external SDK worker pools, as subprocesses.

This is for trying the `portable` runner preset without a cluster (and for the test that checks it gives the
same output as the local preset). It starts

- Beam's Python local job service (`apache_beam.runners.portability.local_job_service_main`, started through
  preprocessing.portable_job_service, which adds the dead-worker watch): the PortableRunner submits the job there;
- N worker pools (`apache_beam.runners.worker.worker_pool_main`), each a process that starts SDK worker processes
  on request, standing in for N machines;
- a small dispatcher (in this process) that speaks the worker-pool protocol and hands the job service's worker
  requests to the pools in turn. The job service asks one address for every worker (environment type EXTERNAL,
  one `environment_config`); on a real cluster each machine's runner asks its own pool instead.

Worker processes run the first `python` on PATH, so this puts the running interpreter's bin directory first.
Pools do not install `--setup_file`: their Python must import the project already (it is installed in .venv).
A worker that dies fails the job with WorkerDied (preprocessing.dead_workers) where Beam's job service alone would
wait for it forever.

With `isolate=DIR` every pool (and the job service) runs in its own folder DIR/<name>/ with its own working
directory (cwd/), TMPDIR (tmp/) and HOME (home/), as on machines that share no disk: what a worker writes is there
or in a bucket, never where the driver or another worker would find it (the cluster simulation of
tests/preprocessing/test_cluster_simulation.py, with preprocess.runner.exchange bucket).

    python -m preprocessing.portable_local --pools 2    # prints the endpoints and a runner config; Ctrl-C stops
    python -m preprocessing.portable_local --pools 2 --isolate /tmp/machines    # each pool in its own folders
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import grpc
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc

from .config import RunnerConfig


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def _wait_ready(address: str, process: subprocess.Popen, log: Path, timeout: float) -> None:
    """Block until a gRPC server answers at `address`; fail with its log if the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        ready = grpc.channel_ready_future(channel)
        while True:
            try:
                ready.result(timeout=0.5)
                return
            except grpc.FutureTimeoutError:
                pass
            if process.poll() is not None:
                raise RuntimeError(f"{' '.join(process.args)} exited with {process.returncode} before serving "
                                   f"{address}; log {log}:\n{log.read_text(errors='replace')[-4000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing answered at {address} within {timeout:.0f} s; log {log}")


class _RoundRobinPools(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
    """A worker pool endpoint that forwards each StartWorker to the next real pool (and StopWorker to the pool
    that started that worker)."""

    def __init__(self, pools: list[str]):
        self._stubs = [beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(grpc.insecure_channel(p)) for p in pools]
        self._turn = itertools.cycle(range(len(pools)))
        self._owner: dict[str, int] = {}
        self._lock = threading.Lock()
        self.started = [0] * len(pools)

    def StartWorker(self, request, context):
        with self._lock:
            index = next(self._turn)
            self._owner[request.worker_id] = index
            self.started[index] += 1
        return self._stubs[index].StartWorker(request, timeout=60)

    def StopWorker(self, request, context):
        with self._lock:
            index = self._owner.pop(request.worker_id, None)
        if index is None:
            return beam_fn_api_pb2.StopWorkerResponse()
        return self._stubs[index].StopWorker(request, timeout=60)


@dataclass
class LocalPortableCluster:
    job_endpoint: str
    worker_endpoint: str  # what environment_config points at: the dispatcher in front of the pools
    pool_endpoints: list[str]
    log_dir: Path
    dispatcher: _RoundRobinPools = field(repr=False)

    def workers_started(self) -> list[int]:
        """SDK workers started so far by each pool."""
        return list(self.dispatcher.started)

    def runner_config(self, num_workers: int | None = None) -> RunnerConfig:
        """The `portable` preset pointed at this cluster (by default one SDK worker per pool)."""
        return RunnerConfig.model_validate({
            "preset": "portable", "num_workers": num_workers or len(self.pool_endpoints),
            "portable": {"job_endpoint": self.job_endpoint,
                         "environment": {"type": "EXTERNAL", "config": self.worker_endpoint}}})


def _stop(process: subprocess.Popen) -> None:
    """Stop a process this module started together with the workers it started (its own process group)."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)


@contextmanager
def local_portable_cluster(pools: int = 2, log_dir: Path | None = None, startup_timeout: float = 120.0,
                           isolate: Path | None = None) -> Iterator[LocalPortableCluster]:
    """Start a local job service and `pools` external worker pools; stop all of them (and their workers) on exit.
    With `isolate`, each of them in its own folder under it (own cwd, TMPDIR and HOME: see the module)."""
    if pools < 1:
        raise ValueError("pools must be >= 1")
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="beam-portable-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    processes: list[subprocess.Popen] = []
    logs = []
    server = None

    def start(name: str, args: list[str], address: str) -> None:
        log = open(log_dir / f"{name}.log", "wb")
        logs.append(log)
        own_env, cwd = env, None
        if isolate is not None:  # a machine of its own: nothing it writes lands where another process looks
            home = Path(isolate) / name
            for sub in ("cwd", "tmp", "home"):
                (home / sub).mkdir(parents=True, exist_ok=True)
            own_env = {**env, "TMPDIR": str(home / "tmp"), "HOME": str(home / "home")}
            own_env.pop("BERTFACTORY_EXCHANGE_SCRATCH", None)
            own_env.pop("BERTFACTORY_SHARD_CACHE", None)
            own_env.pop("BERTFACTORY_WORK_ROOT", None)
            cwd = home / "cwd"
        # own session: one killpg stops the process and the SDK workers it forked
        process = subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT, env=own_env,
                                   stdin=subprocess.DEVNULL, start_new_session=True, cwd=cwd)
        processes.append(process)
        _wait_ready(address, process, log_dir / f"{name}.log", startup_timeout)

    try:
        pool_endpoints = []
        for i in range(pools):
            port = _free_port()
            pool_endpoints.append(f"localhost:{port}")
            start(f"pool-{i}", ["apache_beam.runners.worker.worker_pool_main", f"--service_port={port}"],
                  pool_endpoints[-1])
        job_port = _free_port()
        start("job-service", ["preprocessing.portable_job_service", f"--port={job_port}",
                              f"--staging_dir={log_dir / 'staging'}"], f"localhost:{job_port}")
        dispatcher = _RoundRobinPools(pool_endpoints)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(dispatcher, server)
        dispatch_port = server.add_insecure_port("localhost:0")
        server.start()
        yield LocalPortableCluster(job_endpoint=f"localhost:{job_port}",
                                   worker_endpoint=f"localhost:{dispatch_port}", pool_endpoints=pool_endpoints,
                                   log_dir=log_dir, dispatcher=dispatcher)
    finally:
        if server is not None:
            server.stop(grace=None)
        for process in reversed(processes):
            _stop(process)
        for log in logs:
            log.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", type=int, default=2, help="external worker pools to start (default 2)")
    parser.add_argument("--log-dir", type=Path, default=None, help="where the services write their logs")
    parser.add_argument("--isolate", type=Path, default=None,
                        help="run each pool and the job service in its own folder under this one (own working "
                        "directory, TMPDIR and HOME), as machines that share no disk")
    args = parser.parse_args(argv)
    # SIGTERM (timeout, kill) must also stop the services: they run in their own sessions and would outlive us
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with local_portable_cluster(args.pools, args.log_dir, isolate=args.isolate) as cluster:
        print(f"job service:   {cluster.job_endpoint}")
        print(f"worker pools:  {', '.join(cluster.pool_endpoints)}")
        print(f"environment:   EXTERNAL {cluster.worker_endpoint} (hands workers to the pools in turn)")
        print(f"logs:          {cluster.log_dir}")
        print("preprocess.runner section (JSON; YAML takes it as is):")
        print(json.dumps(cluster.runner_config().model_dump(mode="json", include={"preset", "num_workers",
                                                                                  "portable"}), indent=1))
        print("Ctrl-C stops everything.", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
