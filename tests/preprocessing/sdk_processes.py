"""The Beam SDK worker processes under a process, for the tests that kill one mid-job (test_bad_inputs_dead_worker,
test_dead_worker_late_start): one `ps` listing of the whole table, walked from `root` down."""

from __future__ import annotations

import subprocess


def sdk_workers(root: int) -> list[int]:
    """The SDK worker processes themselves under `root`: the local runner's (`sdk_worker_main`, started through
    /bin/sh -c, which is left alone) and a worker pool's (`SdkHarness(...).run()`)."""
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    children: dict[int, list[tuple[int, str]]] = {}
    for line in listing.splitlines():
        fields = line.split(None, 2)
        if len(fields) == 3:
            children.setdefault(int(fields[1]), []).append((int(fields[0]), fields[2]))
    found, todo = [], [root]
    while todo:
        for pid, args in children.get(todo.pop(), []):
            todo.append(pid)
            if ("sdk_worker_main" in args or "SdkHarness(" in args) and not args.startswith("/bin/sh"):
                found.append(pid)
    return found
