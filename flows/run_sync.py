"""What each stage pulls from and pushes to a run location on object storage (bertfactory.run_location, docs/cluster.md).

The stage runner (flows/stage_runner.py) calls these around every stage; for an ordinary local run directory each
is a no-op. The order is the commit protocol of a run on storage without rename:

    pull_inputs      before the key is computed: the upstream outputs the key hashes (manifest, tokenizer, model)
    pull_state       before the freshness check: the stage's stamps and small outputs (is_fresh fingerprints them)
    pull_resume      after `begin`, same key only: what a stage resumes from (pretrain: the newest checkpoint
                     whose `.complete` marker exists, its metrics so far; evaluate: the parts of every task and
                     score finished so far, each run's own folder pulled by evaluation.run_cache)
    push_outputs     after the stage: its outputs (shards before manifest.json), then its stamp: the stamp is the
                     stage's commit marker, as manifest.json is the shard set's and `.complete` a checkpoint's

Only the job's rank 0 pushes (the ranks of a torchrun job share one run location; each pulls into its own node's
working copy). Shards are never pulled here: each process fetches the ones it opens into its shard cache.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from bertfactory import storage
from bertfactory.run_location import WorkingCopy, remote_of

from . import stamps
from .lock import secondary_rank

logger = logging.getLogger("flows")

# what a stage pushes after it finished: (directory, files of it pushed last, mirror deletions)
_PUSH: dict[str, list[tuple[str, tuple[str, ...], bool]]] = {
    "preprocess": [("tokenizer", (), True), ("shards", ("manifest.json",), True)],
    "pretrain": [("pretrain", ("final/config.json",), False)],  # checkpoints went up as they were written
    "evaluate": [("eval", ("results.json",), False)],
    "distill": [("distill", ("results.json",), False)],
    "tapt": [("tapt", (), False)],
}
_CHECKPOINTS = "pretrain/checkpoints"
_FINAL = "pretrain/final"
# a task's finished fine-tuning runs: pushed as each is written and removed from the run location once the task's part
# is there (evaluation/run_cache.py), so never part of the stage's own push
_EVAL_RUNS = "eval/parts/runs/"
_EXCLUDE = {"pretrain": (f"{_CHECKPOINTS}/",), "evaluate": (_EVAL_RUNS,)}


def working_copy(run_dir: Path) -> WorkingCopy | None:
    """The sync of `run_dir` with its place in the run location (a run directory nested in another's working copy,
    as continued/vN is, syncs with its own sub-path), or None for a local run."""
    url = remote_of(run_dir)
    return WorkingCopy(Path(run_dir), url) if url else None


def _rel(wc: WorkingCopy, path: Path) -> str | None:
    try:
        return Path(path).absolute().relative_to(wc.root.absolute()).as_posix()
    except ValueError:
        return None


def pull_inputs(stage: str, recipe, run_dir: Path) -> None:
    """The files under the run directory that `stage`'s key hashes and its code reads first."""
    wc = working_copy(run_dir)
    if wc is None:
        return
    wanted: list[str] = [f".bertfactory/{stage}.json", f".bertfactory/{stage}.started.json"]
    if stage in ("pretrain", "evaluate", "distill"):
        wanted += ["shards/manifest.json", "tokenizer/tokenizer.json"]
    if stage == "pretrain" and recipe.pretrain.tlm_shards:
        tlm = Path(recipe.pretrain.tlm_shards)
        if not tlm.is_absolute():
            wanted.append((tlm / "manifest.json").as_posix())
    if stage == "evaluate":
        for model in [recipe.evaluate.checkpoint_path(Path(run_dir)), *recipe.evaluate.compared_paths(Path(run_dir))]:
            rel = _rel(wc, model)
            if rel is not None:
                wanted += [f"{rel}/{name}" for name in ("model.safetensors", "config.json", "tokenizer.json",
                                                         "head.json")]
    wc.pull(wanted)


def remote_shards(run_dir: Path) -> dict[str, int]:
    """The run location's shard objects (path under shards/ -> size); {} for a local run."""
    wc = working_copy(run_dir)
    return storage.list_files(wc.remote("shards")) if wc else {}


def pull_state(stage: str, run_dir: Path) -> bool | None:
    """The stage's stamps and, when the run location has the stage's stamp, the outputs is_fresh fingerprints (not
    shards: stamps.is_fresh checks the run location's listing for them). Without that stamp the run location's
    outputs are not committed (a push that died half-way) and are left there. Returns whether the run location has
    the stage's stamp as the working copy has it (None: a local run; False also when the stamp here is newer work
    that never went up)."""
    wc = working_copy(run_dir)
    if wc is None:
        return None
    stamp = f".bertfactory/{stage}.json"
    present = wc.pull([stamp, f".bertfactory/{stage}.started.json"])
    published = stamp in present and not wc.unpublished(stamp)
    if published:
        wc.pull(stamps.STAGES[stage].outputs)
    return published


def set_aside(stage: str, run_dir: Path, why: str) -> None:
    """Before `begin` replaces a stage's outputs: the run location's copies of them are moved aside too
    (`<dir>.replaced-<time>-<old key[:12]>/` beside them, bertfactory/replaced.py), never deleted."""
    wc = working_copy(run_dir)
    if wc is None or secondary_rank():
        return
    previous = stamps.started_record(Path(run_dir), stage).get("key") or "unknown"
    for workdir in stamps.STAGES[stage].workdirs:
        if storage.list_files(wc.remote(workdir)):
            target = wc.move_tree(workdir, previous[:12])
            logger.warning("%s: %s: %s moved to %s (nothing deleted)", stage, why, wc.remote(workdir), target)


def checkpoint_steps(run_dir: Path) -> list[int] | None:
    """The steps of the run location's complete checkpoints; None for a local run."""
    wc = working_copy(run_dir)
    if wc is None:
        return None
    return sorted(int(name.split("-", 1)[1]) for name in wc.complete_dirs(_CHECKPOINTS)
                  if name.startswith("step-") and name.split("-", 1)[1].isdigit())


def after_begin(stage: str, run_dir: Path, step: int | None = None) -> None:
    """Publish the started stamp (so another machine resumes under the same key), then pull what the stage
    resumes from (`step`: the checkpoint an extended run continues, when not the newest)."""
    wc = working_copy(run_dir)
    if wc is None:
        return
    if not secondary_rank():
        wc.push([f".bertfactory/{stage}.started.json"])
    if stage == "pretrain":
        # final/config.json goes up after the rest of final/ (_PUSH): without it the run location's final/ is a
        # push that died half-way, never a result to keep or extend
        committed = storage.exists(wc.remote(f"{_FINAL}/config.json"))
        wc.pull_tree("pretrain", exclude=(f"{_CHECKPOINTS}/",) + (() if committed else (f"{_FINAL}/",)))
        complete = wc.complete_dirs(_CHECKPOINTS)
        # every rank: each resumes from the newest checkpoint its own working copy holds, so a node that was the
        # job's rank 0 when it died (its unpublished checkpoint still here) must not resume from a later step than
        # the others do now (they would train different steps and hang in a collective)
        _drop_unpublished_checkpoints(wc, set(complete))
        steps = sorted((int(name.split("-", 1)[1]), name) for name in complete if name.startswith("step-")
                       and name.split("-", 1)[1].isdigit())
        if step is not None and not secondary_rank():  # an extension: the old run's later checkpoints move aside
            for number, name in steps:
                if number > step:
                    target = wc.move_tree(f"{_CHECKPOINTS}/{name}", f"before{step}")
                    logger.warning("pretrain: the old run's checkpoint %s moved to %s", name, target)
            steps = [(number, name) for number, name in steps if number <= step]
        if steps:
            newest = steps[-1][1]
            chosen = next((name for number, name in steps if number == step), newest)
            logger.info("pretrain: resuming from %s", wc.remote(f"{_CHECKPOINTS}/{chosen}"))
            wc.pull_tree(f"{_CHECKPOINTS}/{chosen}")
    elif stage == "evaluate":
        # evaluations add up (evaluation/parts.py): the tasks and scores finished on any machine are reused, not
        # redone, and stay in results.json
        wc.pull_tree("eval/tasks")
        wc.pull_tree("eval/parts", exclude=(_EVAL_RUNS,))


def _drop_unpublished_checkpoints(wc, complete: set[str]) -> None:
    """A checkpoint complete in the working copy but not in the run location was saved by a process that died
    before uploading it, and the metrics through its step never went up either (they go before its marker). The
    run location is the truth: resuming from it would leave the pulled metrics.jsonl without the records of the
    steps since the location's newest checkpoint. So it goes; the steps after the location's checkpoint are
    trained (and logged) again, to the same weights."""
    local = wc.root / _CHECKPOINTS
    if not local.is_dir():
        return
    for directory in sorted(local.iterdir()):
        if directory.is_dir() and directory.name.startswith("step-") and directory.name not in complete:
            logger.warning("pretrain: checkpoint %s never reached %s (its process died while uploading it): "
                           "not resumed from; removed", directory.name, wc.remote(_CHECKPOINTS))
            # the ranks of a node share its working copy: another may be removing the same directory
            shutil.rmtree(directory, onerror=_gone_already)


def _gone_already(function, path, exc_info) -> None:
    """rmtree's error handler: a file or folder another process removed first is fine; any other error is raised."""
    if not issubclass(exc_info[0], FileNotFoundError):
        raise exc_info[1]


def push_outputs(stage: str, run_dir: Path) -> None:
    """After the stage finished (its stamp written locally): outputs, then the stamp. A mirrored directory keeps in
    the run location the outputs the stamp vouches for that the working copy does not hold (shards are never
    pulled, and a working copy's files may be deleted: it is a cache)."""
    wc = working_copy(run_dir)
    if wc is None or secondary_rank():
        return
    vouched = stamps.recorded_outputs(Path(run_dir), stage)
    for directory, last, mirror in _PUSH.get(stage, []):
        wc.push_tree(directory, last=last, mirror=mirror, exclude=_EXCLUDE.get(stage, ()), keep=vouched)
    wc.push([f".bertfactory/{stage}.json"])
    logger.info("%s: published to %s", stage, wc.url)


def localize_recipe(recipe):
    """The recipe with the model directories and files it names by URL (pretrain.init_from, evaluate.checkpoint and
    compare_checkpoints, preprocess.tokenizer.path, corpus.parent) replaced by their local working copies, pulled;
    each URL is checked first (one line naming it). A recipe without URLs is returned as it is."""
    from bertfactory.run_location import localize, resolve_run_dir

    def model_dir(value):
        return str(localize(value)) if value and storage.is_url(value) else value

    updates = {}
    pre = recipe.pretrain
    if pre.init_from and storage.is_url(pre.init_from):
        updates["pretrain"] = pre.model_copy(update={"init_from": model_dir(pre.init_from)})
    ev = recipe.evaluate
    if storage.is_url(ev.checkpoint) or any(storage.is_url(p) for p in ev.compare_checkpoints):
        updates["evaluate"] = ev.model_copy(update={"checkpoint": model_dir(ev.checkpoint),
                                                    "compare_checkpoints": [model_dir(p) for p in ev.compare_checkpoints]})
    tok = recipe.preprocess.tokenizer
    if tok.path and storage.is_url(tok.path):
        parent, name = storage.normalize(tok.path).rsplit("/", 1)
        wc = WorkingCopy(resolve_run_dir(parent, "tokenizer"), parent)
        if not wc.pull([name]):
            raise storage.StorageError(f"{tok.path}: no such object (preprocess.tokenizer.path)")
        updates["preprocess"] = recipe.preprocess.model_copy(
            update={"tokenizer": tok.model_copy(update={"path": str(wc.root / name)})})
    corpus = recipe.corpus
    if corpus.parent and storage.is_url(corpus.parent):
        # a parent corpus version's shards directory: its manifest, tokenizer and dedup index (its shards are
        # verified through the shard cache: preprocessing.lineage)
        url = storage.normalize(corpus.parent)
        wc = WorkingCopy(resolve_run_dir(url, "corpus.parent"), url)
        wc.pull(["manifest.json", "dedup_index.arrow"])
        if not (wc.root / "manifest.json").is_file():
            raise storage.StorageError(f"{corpus.parent}: no manifest.json there (corpus.parent)")
        import json
        import posixpath

        from bertfactory.run_location import working_copy_of

        tok_rel = json.loads((wc.root / "manifest.json").read_text(encoding="utf-8"))["tokenizer"]["path"]
        bucket_path = url.split("://", 1)[1]
        tok_url = f"{url.split('://', 1)[0]}://{posixpath.normpath(posixpath.join(bucket_path, tok_rel))}"
        # working copies mirror the bucket's paths, so the manifest's relative tokenizer path lands where it points
        storage.download_file(tok_url, working_copy_of(tok_url))
        updates["corpus"] = corpus.model_copy(update={"parent": str(wc.root)})
    return recipe.model_copy(update=updates) if updates else recipe
