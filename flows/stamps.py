"""Stage freshness by content hash, recorded in the run directory.

Each stage has a key: a hash of the settings that decide its result, the content of its input files (source
files, the upstream stage's outputs, the tasks' data) and the bertfactory version. What each stage hashes is
`flows.stage_runner.stage_inputs` (and `flows.tapt.tapt_inputs`, `flows.distill_flow`): the corpus and preprocess
sections whole (preprocess.runner included); the model section and `PretrainConfig.trajectory_fields()` (its
RESUME_NEUTRAL settings -- logging, tracking, checkpoint cadence, threads and the like -- left out); the evaluate or
distill section less RESULT_NEUTRAL (tracking, num_threads); the tapt section and its tasks' settings. So
toggling those left-out settings never makes pretraining, evaluation or distillation stale. When a stage finishes, `RUN/.bertfactory/<stage>.json` records that key and a
fingerprint of its outputs. A rerun whose key matches and whose outputs are intact skips the stage. Under a
changed key (e.g. new masking settings) the stage runs again, its earlier outputs moved aside (never deleted), and
so does each stage downstream, whose input files it rewrites; pretraining has its own rule (`plan`'s `continues`,
flows.stage_runner.pretrain_continues, training/extend.py): a raised max_steps extends the run from a checkpoint,
other train shards replace it, and any other changed setting is refused, naming it, unless --force.

Why a stamp in the run directory and not Prefect's result cache: Prefect knows the inputs but cannot know
whether the outputs in the run directory still exist; the stamp checks both, survives across processes and
machines, and works with or without a Prefect server. The Prefect tasks run with `cache_policy=NO_CACHE`
(flows/stages.py): the stamp is the only cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bertfactory import __version__
from bertfactory.io import atomic_write_json, content_hash, sha256_file
from bertfactory.machine import machine_description
from bertfactory.provenance import code_revision

STAMP_DIR = ".bertfactory"
# what only a run directory holds at its top (docs/run-directory.md), for `bertfactory clean` and evaluate/export's
# "no trained model yet": the stamps and lock every stage under a flow writes, or a file only a stage writes (a run
# written by run_preprocess alone has no .bertfactory/). A folder merely named like a stage's (a user's own shards/,
# eval/ or corpora/) is no sign of a run: `clean ~` would have taken the home folder for one
RUN_ENTRIES = (f"{STAMP_DIR}/", "tokenizer/tokenizer.json", "shards/manifest.json", "pretrain/final/config.json",
               "pretrain/checkpoints/", "pretrain/metrics.jsonl", "eval/results.json", "distill/results.json",
               "corpora/versions.json")
# Files at most this big are fingerprinted by sha256, bigger ones by size (hashing every shard of a large
# corpus on each rerun would cost minutes; shards carry their own sha256 in the manifest).
_HASH_LIMIT = 64 << 20


@dataclass(frozen=True)
class StageSpec:
    name: str
    outputs: tuple[str, ...]  # paths relative to RUN that must exist when the stage is done
    workdirs: tuple[str, ...]  # directories the stage owns (moved aside when its key changes: `begin`)


STAGES = {
    "preprocess": StageSpec(
        "preprocess", ("tokenizer/tokenizer.json", "shards/manifest.json"), ("shards", "tokenizer")
    ),
    "pretrain": StageSpec(
        "pretrain",
        ("pretrain/final/model.safetensors", "pretrain/final/config.json", "pretrain/final/tokenizer.json"),
        ("pretrain",),
    ),
    # no workdir: evaluations add up (evaluation/parts.py keeps each task's results with its own key), so a new
    # key never clears eval/
    "evaluate": StageSpec("evaluate", ("eval/results.json", "eval/report.md"), ()),
    "distill": StageSpec("distill", ("distill/results.json", "distill/report.md"), ("distill",)),
    # a recipe's tapt section (flows/tapt.py): the imported model and the task corpus
    "tapt": StageSpec("tapt", ("tapt/corpus.jsonl", "tapt/unadapted/model.safetensors", "tapt/unadapted/config.json",
                               "tapt/unadapted/tokenizer.json"), ("tapt",)),
}


def file_fingerprint(path: Path) -> str:
    size = path.stat().st_size
    return sha256_file(path) if size <= _HASH_LIMIT else f"size:{size}"


def _input_name(path: Path, run_dir: Path | None, roots: dict[str, Path] | None = None) -> str:
    """How an input file is named in the key: relative to the run directory when inside it (so the same run
    directory given as a relative or an absolute path, or moved, gives the same key), else relative to one of
    `roots` (NAME/<path inside it>: a place whose files are the same content on every machine wherever it lies,
    as the samples cache is), else its absolute path."""
    path = Path(path).resolve()
    for name, root in ([("RUN", Path(run_dir))] if run_dir is not None else []) + list((roots or {}).items()):
        try:
            return f"{name}/" + path.relative_to(Path(root).resolve()).as_posix()
        except ValueError:
            pass
    return str(path)


# what each key computed in this process was made of (config, input fingerprints): `begin` records it in the started
# stamp, so that a later key can say which setting or input changed (an extended pretraining run, a refusal)
_DETAILS: dict[str, dict] = {}


# keys an earlier bertfactory computed for the same config and inputs, spelled differently (absolute paths where
# machine-independent names are used now): a stamp under one of them is as good as one under the key itself
_EARLIER: dict[str, tuple[str, ...]] = {}


def _hashed(stage: str, config: dict, inputs: dict) -> str:
    return content_hash({"stage": stage, "bertfactory": __version__, "config": config, "inputs": inputs})


def stage_key(stage: str, config: dict, input_files: list[Path], run_dir: Path | None = None,
              roots: dict[str, Path] | None = None, earlier: tuple[dict, dict[str, Path] | None] | None = None) -> str:
    """The content hash that decides whether `stage` must run. `roots`: named places its input files outside the
    run directory are named relative to (`_input_name`). `earlier`: (config, roots) as an earlier bertfactory
    spelled them for the same inputs; the key they give is accepted in place of this one (`accepted_keys`), so a
    run stamped before a spelling changed keeps its outputs."""
    fingerprints = [(p, file_fingerprint(p)) for p in input_files]
    inputs = {_input_name(p, run_dir, roots): fp for p, fp in fingerprints}
    key = _hashed(stage, config, inputs)
    _DETAILS[key] = {"config": config, "inputs": inputs, "bertfactory": __version__}
    if earlier is not None:
        old_config, old_roots = earlier
        old = _hashed(stage, old_config, {_input_name(p, run_dir, old_roots): fp for p, fp in fingerprints})
        _EARLIER[key] = () if old == key else (old,)
    return key


def accepted_keys(key: str) -> tuple[str, ...]:
    """`key` and the earlier spellings of it that `stage_key` computed in this process."""
    return (key, *_EARLIER.get(key, ()))


def key_details(key: str) -> dict | None:
    """{config, inputs, bertfactory} of a key computed by `stage_key` in this process, None otherwise."""
    return _DETAILS.get(key)


def _stamp_path(run_dir: Path, stage: str, suffix: str = "") -> Path:
    return run_dir / STAMP_DIR / f"{stage}{suffix}.json"


def _outputs(run_dir: Path, stage: str) -> list[Path]:
    spec = STAGES[stage]
    files = [run_dir / o for o in spec.outputs]
    if stage == "preprocess" and (run_dir / "shards/manifest.json").is_file():
        try:
            manifest = json.loads((run_dir / "shards/manifest.json").read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return files  # an unreadable manifest no longer matches its recorded fingerprint: not fresh
        for split in manifest.get("splits", {}).values():
            files += [run_dir / "shards" / s["path"] for s in split.get("shards", [])]
    return files


def is_fresh(run_dir: Path, stage: str, key: str) -> bool:
    """True when `stage` finished with this key and its outputs are unchanged since."""
    path = _stamp_path(run_dir, stage)
    if not path.is_file():
        return False
    try:
        stamp = json.loads(path.read_text())
    except json.JSONDecodeError:
        return False
    if stamp.get("key") not in accepted_keys(key):
        return False
    recorded = stamp.get("outputs", {})
    remote = None
    for f in _outputs(run_dir, stage):
        rel = str(f.relative_to(run_dir))
        if not f.is_file() and stage == "preprocess" and rel.startswith("shards/"):
            # a run on object storage keeps its shards there, not in the working copy: each must still be there
            # with the bytes the stamp recorded (sha256 = the manifest's, which every download verifies)
            remote = _remote_shards(run_dir) if remote is None else remote
            if rel[len("shards/"):] in remote and _recorded_matches(recorded.get(rel), rel, run_dir, remote):
                continue
            return False
        if not f.is_file() or recorded.get(rel) != file_fingerprint(f):
            return False
    return True


def _remote_shards(run_dir: Path) -> dict[str, int]:
    from bertfactory import storage
    from bertfactory.run_location import remote_of

    url = remote_of(run_dir)
    return storage.list_files(storage.join(url, "shards")) if url else {}


def _recorded_matches(recorded: str | None, rel: str, run_dir: Path, remote: dict[str, int]) -> bool:
    """A shard's recorded fingerprint against what the run location and the manifest say of it."""
    if recorded is None:
        return False
    if recorded.startswith("size:"):
        return recorded == f"size:{remote[rel[len('shards/'):]]}"
    manifest = json.loads((run_dir / "shards/manifest.json").read_text(encoding="utf-8"))
    name = rel[len("shards/"):]
    return any(s["path"] == name and s["sha256"] == recorded
               for split in manifest.get("splits", {}).values() for s in split.get("shards", []))


def started_record(run_dir: Path, stage: str) -> dict:
    """What `<stage>.started.json` says: the key the stage's outputs were started under and (since issue 35) the
    config and input fingerprints of that key; {} when there is none."""
    started = _stamp_path(run_dir, stage, ".started")
    try:
        return json.loads(started.read_text()) if started.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}


@dataclass(frozen=True)
class Plan:
    """What `begin` does with a stage's existing outputs: start (there are none), keep (resume or extend them) or
    replace (move them aside), and why."""

    action: str
    why: str = ""
    step: int | None = None  # an extended pretraining run: the checkpoint it continues


def plan(run_dir: Path, stage: str, key: str, force: bool = False, continues=None,
         remote_outputs: bool = False) -> Plan:
    """Decide before anything is touched. Outputs started under the same key are kept (a crash, Ctrl-C, a killed
    worker: the stage resumes). Under another key, `continues(old, new)` (the stage's own rule, e.g. pretraining's
    extension: flows/stage_runner.py) gets both keys' details and returns a Plan or raises the refusal; without a
    rule, or with `force`, the outputs are replaced (moved aside, never deleted). `remote_outputs`: a run location
    may hold outputs that the working copy does not."""
    spec = STAGES[stage]
    if not spec.workdirs:
        return Plan("start")
    previous = started_record(run_dir, stage)
    local = any((run_dir / d).exists() for d in spec.workdirs)
    if not local and not (remote_outputs and previous):
        return Plan("start")
    if previous.get("key") in accepted_keys(key):
        return Plan("keep", "started under the same key")
    if force:
        return Plan("replace", "--force")
    old, new = _portable_details(previous, run_dir), key_details(key)
    if continues is None or new is None:
        return Plan("replace", "its inputs changed")
    return continues(old, new)  # old may lack config/inputs (a stamp of an earlier bertfactory): the rule decides


def _portable_details(details: dict, run_dir: Path) -> dict:
    """A started stamp's config and input names as stage keys spell them now (bertfactory/portable_paths.py): a
    stamp written before they were machine-independent names this machine's absolute paths, which are the same
    setting, not a changed one."""
    from bertfactory.portable_paths import portable_name, portable_values

    if "config" not in details:
        return details
    return {**details, "config": portable_values(details["config"], run_dir),
            "inputs": {portable_name(name, run_dir): fp for name, fp in details.get("inputs", {}).items()}}


def begin(run_dir: Path, stage: str, key: str, log=None, decided: Plan | None = None) -> Plan:
    """Called before a stage runs: carry out the plan (`plan` with no rule when not given). Outputs to replace are
    moved aside to `<dir>.replaced-<time>-<old key[:12]>/` beside them (bertfactory/replaced.py; `bertfactory clean`
    deletes them when asked); nothing is deleted. Then the started stamp records the key and its details."""
    from bertfactory.replaced import move_aside

    decided = decided or plan(run_dir, stage, key)
    previous = started_record(run_dir, stage)
    if decided.action == "replace":
        spec = STAGES[stage]
        for d in [run_dir / d for d in spec.workdirs if (run_dir / d).exists()]:
            try:
                target = move_aside(d, (previous.get("key") or "unknown")[:12])
            except FileNotFoundError:  # another rank of the same job moved it first
                continue
            if log:
                log(f"{stage}: {decided.why}: the outputs in {d} moved to {target} (nothing deleted; "
                    f"`bertfactory clean {run_dir}` deletes replaced outputs)")
    elif decided.action == "keep" and decided.why and previous.get("key") not in accepted_keys(key) and log:
        log(f"{stage}: {decided.why}")
    _stamp_path(run_dir, stage).unlink(missing_ok=True)
    atomic_write_json(_stamp_path(run_dir, stage, ".started"), {"key": key, "stage": stage, **(key_details(key) or {})})
    # read (and cached for the process) now: `finish` records the code that ran the stage, not a commit checked out
    # while it ran (a `git pull` during an hour of pretraining)
    code_revision()
    return decided


def finish(run_dir: Path, stage: str, key: str, summary: dict, seconds: float | None = None) -> None:
    """Record the stage as done: its key, its outputs' fingerprints, its summary, and for the record (freshness
    reads only key and outputs) the wall seconds it took, when it finished, the code that ran it and the machine it
    ran on (bertfactory/machine.py: CPU model, vendor, cores, instruction sets)."""
    outputs = {str(f.relative_to(run_dir)): file_fingerprint(f) for f in _outputs(run_dir, stage) if f.is_file()}
    record = {"key": key, "stage": stage, "outputs": outputs, "summary": summary,
              "seconds": None if seconds is None else round(seconds, 2),
              "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "code": code_revision(),
              "machine": machine_description()}
    atomic_write_json(_stamp_path(run_dir, stage), record)


def recorded_run(run_dir: Path, stage: str) -> dict:
    """The stamp of a finished stage (key, outputs, summary, seconds, finished_at, code, machine), {} when it has
    none. Stamps written before seconds/code/machine were recorded lack those keys."""
    path = _stamp_path(run_dir, stage)
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        return {}


def recorded_summary(run_dir: Path, stage: str) -> dict:
    path = _stamp_path(run_dir, stage)
    return json.loads(path.read_text()).get("summary", {}) if path.is_file() else {}


def recorded_outputs(run_dir: Path, stage: str) -> set[str]:
    """The outputs (paths relative to the run directory) the stage's stamp vouches for; empty without a stamp."""
    path = _stamp_path(run_dir, stage)
    try:
        return set(json.loads(path.read_text()).get("outputs", {})) if path.is_file() else set()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return set()


def is_run_directory(path: Path) -> bool:
    """Whether the local directory `path` is a run directory: one of RUN_ENTRIES (a folder where it ends in "/", else
    a file), or a replaced output folder."""
    from bertfactory.replaced import is_replaced

    path = Path(path)
    return path.is_dir() and (any((path / entry).is_dir() if entry.endswith("/") else (path / entry).is_file()
                                  for entry in RUN_ENTRIES)
                              or any(is_replaced(child.name) for child in path.iterdir()))
