"""Real object-storage API servers on 127.0.0.1 for the tests: moto in server mode (the S3 API) and
gcp-storage-emulator (the GCS JSON API), both test dependencies from PyPI. Nothing beyond loopback is reached.

    with s3_server() as server:             # server.env: AWS_ENDPOINT_URL, keys, region
        server.make_bucket("runs")
    with gcs_server() as server:            # server.env: STORAGE_EMULATOR_HOST
        server.make_bucket("runs")

`server.env` is what a subprocess (a CLI run, a torchrun rank, a Beam worker) needs to reach it; `server.apply()`
puts it into this process's environment (monkeypatch-style, undone by `server.restore()`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class StorageServer:
    scheme: str
    process: subprocess.Popen
    port: int
    env: dict[str, str]
    _saved: dict[str, str | None] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def apply(self) -> None:
        for key, value in self.env.items():
            self._saved.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    def restore(self) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved.clear()

    def make_bucket(self, name: str) -> str:
        import fsspec

        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            if self.scheme == "s3":
                fs = fsspec.filesystem("s3", skip_instance_cache=True)
            else:
                from gcsfs.core import GCSFileSystem  # the JSON-API client (bertfactory.storage says why)

                fs = GCSFileSystem(token="anon", project="emulator", skip_instance_cache=True)
            fs.mkdir(name)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return f"{self.scheme}://{name}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _wait_ready(url: str, process: subprocess.Popen, what: str, timeout: float = 180.0) -> None:  # hang bound
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode} before it was ready")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return  # it answers: a 4xx for the bare root is still a live server
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer on {url} within {timeout:.0f} s")


def start_s3(port: int | None = None) -> StorageServer:
    port = port or free_port()
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_ready(f"http://127.0.0.1:{port}/", process, "moto S3 server")
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    return StorageServer("s3", process, port, env)


def start_gcs(port: int | None = None) -> StorageServer:
    port = port or free_port()
    exe = shutil.which("gcp-storage-emulator") or str(Path(sys.executable).parent / "gcp-storage-emulator")
    data = tempfile.mkdtemp(prefix="gcs-emulator-")
    process = subprocess.Popen([exe, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=data)
    _wait_ready(f"http://127.0.0.1:{port}/storage/v1/b", process, "GCS emulator")
    env = {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}", "GOOGLE_CLOUD_PROJECT": "emulator"}
    return StorageServer("gs", process, port, env)


@contextmanager
def s3_server() -> Iterator[StorageServer]:
    server = start_s3()
    try:
        yield server
    finally:
        server.restore()
        server.stop()


@contextmanager
def s3_bucket(name: str) -> Iterator[str]:
    """A fresh S3 server with one bucket, its endpoint in this process's environment until the end: the bucket's
    URL (a module fixture's whole body)."""
    with s3_server() as server:
        server.apply()
        yield server.make_bucket(name)


@contextmanager
def gcs_server() -> Iterator[StorageServer]:
    server = start_gcs()
    try:
        yield server
    finally:
        server.restore()
        server.stop()


class TcpProxy:
    """A loopback TCP forwarder in front of a server, which a test can cut (every open connection reset, new ones
    refused) and restore: the storage server "going away" mid-job while its data stays, so that the test can then
    check what was and was not published, and rerun against the same bucket.

        proxy = TcpProxy(server.port); env = {**server.env, "AWS_ENDPOINT_URL": proxy.endpoint}
        proxy.cut(); ...; proxy.restore(); proxy.close()
    """

    def __init__(self, target_port: int):
        import threading

        self.target = target_port
        self.port = free_port()
        self._open = True
        self._closing = False
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", self.port))
        self._listener.listen(64)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        import threading

        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self._open = False
        with self._lock:
            for s in self._conns:
                try:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    # shutdown first: close() alone does not wake a _pipe thread blocked in recv() on it, and while
                    # that recv holds the socket the kernel sends nothing, so the client of a request in flight
                    # waited for its read timeout (60 s per attempt) instead of seeing the server go away
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s.close()  # linger 0: a reset, as a dead server's host sends
                except OSError:
                    pass
            self._conns.clear()

    def restore(self) -> None:
        self._open = True

    def close(self) -> None:
        self._closing = True
        self.cut()
        self._listener.close()
