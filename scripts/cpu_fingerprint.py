"""Which numbers this CPU computes: a digest of a short fine-tuning run under each kernel setting, compared with the
machines recorded in benchmarks/cpu_fingerprints.json.

A fine-tuning run is bitwise reproducible on one machine; across machines it is the same only where every library
under torch takes the same code path (docs/results.md, "Determinism"). The project pins ATen, MKL and oneDNN to
their AVX2 kernels (bertfactory/cpu_kernels.py), which makes Intel CPUs agree with each other; MKL honours that pin
on Intel CPUs only (on an AMD CPU it reports `CNR:AUTO`), and its `COMPATIBLE` branch is the one every vendor's CPU
honours. This script measures, instead of assuming, which settings give the same weights on which machines: run it
on each machine (of a fleet, or of this project's sessions) with `--record`, and machines whose digests are equal
under a setting compute the same fine-tuning scores under it.

    .venv/bin/python scripts/cpu_fingerprint.py            # this machine's digests, compared with the recorded ones
    .venv/bin/python scripts/cpu_fingerprint.py --record   # ... and add (or replace) this machine's entry

Each setting runs in a fresh interpreter (the variables are read once, when torch loads): 12 AdamW steps of a 2-layer
BERT encoder with a classification head, dropout on, 2 threads (the digest depends on the thread count and the
torch build, both recorded). ~5-10 s per setting.
"""

from __future__ import annotations

import bertfactory  # noqa: F401 -- first: the kernel pin is in this process's environment, children inherit it

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from bertfactory.cpu_kernels import PINNED, SWITCH, mkl_branch
from bertfactory.io import atomic_write_json
from bertfactory.machine import machine_description, render
from bertfactory.provenance import code_revision

REPO = Path(__file__).resolve().parents[1]
RECORD = REPO / "benchmarks" / "cpu_fingerprints.json"

# 12 fine-tuning steps of a 2-layer BERT encoder + classification head (dropout on), 2 threads; prints the kernels
# torch used and a digest of the weights (also tests/bertfactory/test_cpu_kernels.py's cross-machine check)
FINETUNE = """
import bertfactory, hashlib, torch
from training.models.bert.model import BertConfig, BertModel
from evaluation.heads import TaskModel
torch.set_num_threads(2)
torch.manual_seed(0)
encoder = BertModel(BertConfig(vocab_size=500, hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128,
                               max_position_embeddings=64))
model = TaskModel(encoder, "classification", 3, 0.1)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6, fused=True)
for step in range(12):
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(5, 500, (16, 48), generator=g)
    mask = torch.ones(16, 48, dtype=torch.bool)
    mask[:, 40:] = False
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask,
             "labels": torch.randint(0, 3, (16,), generator=g)}
    model.loss(model(batch), batch).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values())).hexdigest()
print(torch.backends.cpu.get_cpu_capability(), digest)
"""

# name -> the variables that differ from this process's environment (which holds the pin, or what the user set)
SETTINGS: dict[str, dict[str, str]] = {
    "pinned": {},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
}


def run_finetune(env: dict[str, str], timeout: float = 600.0) -> tuple[str, str, float]:
    """FINETUNE in a fresh interpreter with `env` -> (ATen kernels, weight digest, wall seconds)."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", FINETUNE], env={**env, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"the fine-tuning snippet failed under {_describe_env(env)}:\n{out.stderr[-2000:]}")
    kernels, digest = out.stdout.split()[-2:]
    return kernels, digest, time.perf_counter() - started


def _describe_env(env: dict[str, str]) -> str:
    return ", ".join(f"{name}={env.get(name, 'unset')}" for name in (*PINNED, SWITCH) if name in env) or "no pin"


def _torch_build() -> dict[str, str | None]:
    """torch's version and its MKL's, read in a child (this process has not loaded torch, and need not)."""
    code = ("import torch, re; m = re.search(r'Math Kernel Library Version ([^\\n]*?)-Product', "
            "torch.__config__.show()); print(torch.__version__); print(m.group(1) if m else '')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines() if out.returncode == 0 else []
    return {"torch": lines[0] if lines else None, "mkl": (lines[1] or None) if len(lines) > 1 else None}


def fingerprint(settings: dict[str, dict[str, str]] = SETTINGS) -> dict:
    """This machine's entry: its description, torch and MKL versions, and per setting the variables in force, the
    MKL branch MKL reported, the ATen kernels, the weight digest and the snippet's wall seconds."""
    machine = machine_description()
    entry: dict = {"machine": render(machine), "cpu": machine.get("cpu"), "vendor": machine.get("vendor"),
                   "isa": machine.get("isa"), **_torch_build(), "threads": 2, "settings": {}}
    for name, changes in settings.items():
        env = {**os.environ, **changes}
        kernels, digest, seconds = run_finetune(env)
        entry["settings"][name] = {"env": {v: env.get(v) for v in PINNED}, "mkl_branch": mkl_branch(env),
                                   "kernels": kernels, "digest": digest, "seconds": round(seconds, 1)}
    revision = code_revision()
    entry.update(commit=revision.get("commit"), dirty=revision.get("dirty"),
                 date=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    return entry


def _key(entry: dict) -> tuple:
    """One entry per CPU model, vendor, instruction sets and torch build: a rerun on the same kind of machine
    replaces it (cloud CPUs often name only "AMD EPYC": the instruction sets tell an AVX2 one from an AVX-512 one)."""
    return entry.get("cpu"), entry.get("vendor"), tuple(entry.get("isa") or ()), entry.get("torch")


def load(path: Path = RECORD) -> list[dict]:
    if not path.exists():
        return []
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("version") != 1 or not isinstance(doc.get("machines"), list):
        raise ValueError(f"{path}: not a cpu_fingerprints document of version 1 (expected "
                         "{'version': 1, 'machines': [...]})")
    return doc["machines"]


def record(entry: dict, path: Path = RECORD) -> list[dict]:
    """Add `entry` to the file, replacing the entry of the same CPU model, vendor, instruction sets and torch
    build."""
    machines = [m for m in load(path) if _key(m) != _key(entry)] + [entry]
    atomic_write_json(path, {"version": 1, "machines": machines})
    return machines


def compare(entry: dict, machines: list[dict]) -> str:
    """A markdown table: per recorded machine of the same torch build (this one first), per setting, its MKL branch
    and whether its digest equals this machine's."""
    names = list(entry["settings"])
    others = [m for m in machines if m.get("torch") == entry.get("torch") and _key(m) != _key(entry)]
    rows = ["| machine | commit | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]

    def cell(m: dict, name: str, this: bool) -> str:
        s = m.get("settings", {}).get(name)
        if s is None:
            return "not measured"
        same = "this machine" if this else ("**same weights**" if s["digest"] == entry["settings"][name]["digest"]
                                            else "other weights")
        return f"CNR:{s.get('mkl_branch')}, {s['digest'][:12]}: {same}"

    for m, this in [(entry, True), *((m, False) for m in others)]:
        rows.append(f"| {m['machine']} | {(m.get('commit') or '?')[:7]} | "
                    + " | ".join(cell(m, name, this) for name in names) + " |")
    skipped = len([m for m in machines if m.get("torch") != entry.get("torch")])
    if skipped:
        rows.append(f"\n({skipped} recorded machine(s) of another torch build not compared: their digests differ "
                    "for that reason alone)")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", action="store_true", help="add this machine's entry to --file (replacing the "
                        "entry of the same CPU model, vendor, instruction sets and torch build)")
    parser.add_argument("--file", type=Path, default=RECORD, help="the recorded machines (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print this machine's entry as JSON, not the table")
    args = parser.parse_args(argv)
    entry = fingerprint()
    machines = record(entry, args.file) if args.record else load(args.file)
    if args.json:
        print(json.dumps(entry, indent=1))
        return 0
    for name, s in entry["settings"].items():
        print(f"{name}: MKL CNR:{s['mkl_branch']}, ATen {s['kernels']}, digest {s['digest']}, {s['seconds']} s")
    print()
    print(compare(entry, machines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
