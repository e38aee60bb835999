"""Trained module states kept under the key of everything that decided them, so a distillation study trains each
once: the general students (distillation/general_cache.py) and the fine-tuned teachers (distillation/stage.py).

An entry, `<cache>/<name>-<key16>/`, holds `state.pt` (the states of the modules the training changed), `key.json`
(the key document it hashes, and the final loss) and `metrics.jsonl` (the loss lines of the run that made it). The
caller's key document names every input that decides the result (weights by `state_digest`, data by their sha256,
settings, seed, device, CPU thread count, torch version). A hit loads the state and trains nothing; any other input
misses. Entries are published whole (a staging directory renamed into place), so a crash leaves no half entry; two
runs that miss at once both train, and the first rename wins (byte-identical by determinism). An entry whose
`key.json` does not hold the document its name hashes is refused, naming the file.

On object storage a cache is a location of its own (`resolve_cache`): relative to a run on a bucket it is the same
path in the bucket, or any s3:// / gs:// URL, so nodes that share no disk share the entries. A miss trains,
publishes locally, then pushes the entry with its `.complete` marker last (bertfactory.run_location); a lookup
trusts an entry only with that marker and pulls it into the local working copy; a local hit that the location lacks
(its push failed) is pushed again.

    cache_dir, url = resolve_cache("cache/distill-general", run_dir)
    record = StateCache(cache_dir, url).run("tinybert", key_doc, {"student": student.bert}, train=lambda: [...])
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from bertfactory import storage
from bertfactory.errors import ConfigError, ContractError
from bertfactory.io import AtomicFile, append_jsonl, atomic_write_json, canonical_json
from bertfactory.run_location import MARKER, WorkingCopy, remote_of, resolve_run_dir

logger = logging.getLogger(__name__)

KEY_FORMAT = 1


def state_digest(modules: dict[str, nn.Module]) -> str:
    """sha256 over every named parameter and buffer of `modules` (name, dtype, shape and bytes, in name order)."""
    digest = hashlib.sha256()
    for prefix in sorted(modules):
        state = modules[prefix].state_dict()
        for name in sorted(state):
            tensor = state[name].detach().to("cpu").contiguous()
            digest.update(f"{prefix}.{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def arrays_digest(arrays: dict) -> str:
    """sha256 over named arrays (or lists of arrays: one per row), each with its dtype and shape, in name order;
    a str / int / float / None value by its repr."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        value = arrays[name]
        if value is None or isinstance(value, (str, int, float)):
            digest.update(f"{name}={value!r}|".encode())
            continue
        rows = [value] if isinstance(value, np.ndarray) else list(value)
        digest.update(f"{name}|{len(rows)}|".encode())
        for row in rows:
            row = np.ascontiguousarray(row)
            digest.update(f"{row.dtype}|{row.shape}|".encode())
            digest.update(row.tobytes())
    return digest.hexdigest()


def resolve_cache(setting: str | None, run_dir: Path, field: str) -> tuple[Path | None, str | None]:
    """A cache setting (`field` names it in errors) -> (the local directory of the entries, the URL they are shared
    through or None). A URL is its own location; a relative path is resolved against the run directory, and for a
    run on object storage against its run location (the same path in the bucket; `..` may leave the run, not the
    bucket); an absolute path is local. None: no cache."""
    if setting is None:
        return None, None
    if storage.is_url(setting):
        url = storage.normalize(setting)
    else:
        run_url = remote_of(run_dir)
        if run_url is None or Path(setting).is_absolute():
            # normalised, so results.json names RUN/cache/..., not RUN/x/../cache/...
            return Path(os.path.normpath(Path(run_dir) / setting)), None
        scheme, rest = run_url.split("://", 1)
        joined = posixpath.normpath(posixpath.join(rest, setting))
        if joined.split("/", 1)[0] != rest.split("/", 1)[0] or joined in (".", ".."):
            raise ConfigError(f"{field} {setting!r}: relative to the run location {run_url} it leaves the bucket; "
                              "give a URL (s3://BUCKET/PATH) instead")
        url = f"{scheme}://{joined}"
    return resolve_run_dir(url, field), url


def _timed(train: Callable[[], list[dict]]) -> tuple[list[dict], dict]:
    wall, cpu = time.perf_counter(), time.process_time()
    records = train()
    return records, {"wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(time.process_time() - cpu, 2)}


class RngState(nn.Module):
    """torch's random state (CPU, and `device`'s when it is a GPU) as module buffers, so an entry can keep the state a
    phase left: a later phase that draws from the global generator (TinyBERT's projections without general
    distillation) then draws the same numbers whether the phase ran or was reused."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device if device.type == "cuda" else None
        self.register_buffer("state", torch.get_rng_state())
        self.register_buffer("device_state", torch.cuda.get_rng_state(self.device) if self.device is not None
                             else torch.empty(0, dtype=torch.uint8))

    def capture(self) -> None:
        self.state = torch.get_rng_state()
        if self.device is not None:
            self.device_state = torch.cuda.get_rng_state(self.device)

    def restore(self) -> None:
        torch.set_rng_state(self.state)
        if self.device is not None:
            torch.cuda.set_rng_state(self.device_state, self.device)


class StateCache:
    """Entries of trained module states in `cache_dir` (None: no cache, always trains); `url`: the location they
    are shared through (`cache_dir` is then its working copy)."""

    def __init__(self, cache_dir: Path | None, url: str | None = None):
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.shared = WorkingCopy(self.cache_dir, url) if url is not None and self.cache_dir is not None else None

    def run(self, name: str, key_doc: dict, trained: dict[str, nn.Module], train: Callable[[], list[dict]],
            what: str) -> dict:
        """Train `trained` in place by `train()` (which returns its metrics records), or load it from the entry of
        `key_doc`. `what` names it in the log. -> {"key", "cache", "reused", "final_loss", "cost"} for results.json;
        `cost`: the wall and CPU seconds (this process) the training took where it ran, so a reuse shows what it
        saved and a study can be sized from its entries."""
        key = hashlib.sha256(canonical_json({"format": KEY_FORMAT, **key_doc}).encode()).hexdigest()
        record = {"key": key[:16], "cache": None, "reused": False}
        if self.cache_dir is None:
            records, cost = _timed(train)
            return {**record, "final_loss": records[-1].get("loss") if records else None, "cost": cost}
        entry = self.cache_dir / f"{name}-{key[:16]}"
        record["cache"] = self.shared.remote(entry.name) if self.shared is not None else str(entry)
        shared = self.shared is not None and storage.exists(self.shared.remote(f"{entry.name}/{MARKER}"))
        if shared and not (entry / "state.pt").is_file():
            # state.pt is the last of the entry's files in pull order: with it here, the rest is here too
            self.shared.pull_tree(entry.name)
            logger.info("%s: pulled %s", what, self.shared.remote(entry.name))
        if (entry / "state.pt").is_file():
            final_loss, cost = self._load(entry, key_doc, trained)
            logger.info("%s: reused %s (same inputs, settings, seed and threads), not trained again%s", what, entry,
                        f" ({cost['cpu_s']:.0f} CPU-s saved)" if cost else "")
            if self.shared is not None and not shared:  # trained here, but its push never finished
                self._share(entry, what)
            return {**record, "reused": True, "final_loss": final_loss, "cost": cost}
        records, cost = _timed(train)
        final_loss = records[-1].get("loss") if records else None
        self._publish(entry, key_doc, trained, records, final_loss, cost)
        logger.info("%s: cached in %s (key %s)", what, entry, key[:16])
        if self.shared is not None:
            self._share(entry, what)
        return {**record, "final_loss": final_loss, "cost": cost}

    def _share(self, entry: Path, what: str) -> None:
        """Push the entry, its `.complete` marker last: another machine trusts it only then."""
        self.shared.publish_dir(entry.name)
        logger.info("%s: shared as %s", what, self.shared.remote(entry.name))

    @staticmethod
    def _load(entry: Path, key_doc: dict, trained: dict[str, nn.Module]) -> tuple[float | None, dict | None]:
        stored = json.loads((entry / "key.json").read_text(encoding="utf-8"))
        if stored.get("key") != {"format": KEY_FORMAT, **key_doc}:
            raise ContractError(f"{entry / 'key.json'}: the entry's inputs are not the ones its name hashes (edited "
                                "or truncated name?); delete the entry to train it again")
        state = torch.load(entry / "state.pt", map_location="cpu", weights_only=True)
        for name, module in trained.items():
            module.load_state_dict(state[name])
        return stored.get("final_loss"), stored.get("cost")

    @staticmethod
    def _publish(entry: Path, key_doc: dict, trained: dict[str, nn.Module], records: list[dict],
                 final_loss: float | None, cost: dict) -> None:
        staging = entry.with_name(f".{entry.name}.staging-{os.getpid()}")
        if entry.exists() and not (entry / "state.pt").is_file():  # not an entry this module published
            shutil.rmtree(entry)
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        with AtomicFile(staging / "state.pt") as tmp:
            torch.save({name: {k: v.detach().to("cpu") for k, v in module.state_dict().items()}
                        for name, module in trained.items()}, tmp)
        append_jsonl(staging / "metrics.jsonl", records)
        atomic_write_json(staging / "key.json", {"key": {"format": KEY_FORMAT, **key_doc}, "final_loss": final_loss,
                                                 "cost": cost})
        try:
            os.replace(staging, entry)
        except OSError:  # another run published the same key first: its state is the same
            shutil.rmtree(staging, ignore_errors=True)
