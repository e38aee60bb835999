"""How long one storage operation takes to fail against an S3 endpoint that accepts connections and never answers
(a hung server or a network path that drops replies): the time a stage waits before its one `error:` line.

A loopback TCP listener that accepts and reads nothing stands in for the endpoint; `bertfactory.storage.read_bytes`
is timed in a fresh process per setting of AWS_MAX_ATTEMPTS (botocore's attempts; s3fs retries each failed call
itself on top), counting the connections it opened.

    .venv/bin/python benchmarks/storage_unresponsive.py [--attempts default 2]      # ~10 minutes with both
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from bertfactory import storage
t = time.perf_counter()
try:
    storage.read_bytes("s3://bucket/key")
    print("answered")
except storage.StorageError as err:
    print(f"{{time.perf_counter() - t:.1f}}|{{err}}")
"""


def silent_endpoint() -> tuple[socket.socket, list[socket.socket]]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return listener, accepted


def measure(attempts: str) -> dict:
    listener, accepted = silent_endpoint()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{listener.getsockname()[1]}", AWS_ACCESS_KEY_ID="unused",
               AWS_SECRET_ACCESS_KEY="unused", AWS_DEFAULT_REGION="us-east-1")
    if attempts != "default":
        env["AWS_MAX_ATTEMPTS"] = attempts
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO))], env=env, capture_output=True,
                         text=True, timeout=3600).stdout.strip().splitlines()[-1]
    listener.close()
    seconds, _, error = out.partition("|")
    return {"AWS_MAX_ATTEMPTS": attempts, "seconds_to_fail": float(seconds) if error else None,
            "connections": len(accepted), "error": error or out, "process_s": round(time.perf_counter() - t0, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", nargs="+", default=["default", "2"],
                        help="AWS_MAX_ATTEMPTS values to time ('default': unset)")
    args = parser.parse_args()
    for attempts in args.attempts:
        print(json.dumps(measure(attempts)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
