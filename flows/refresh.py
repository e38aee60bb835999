"""The `corpus_refresh` flow: watch source locations, build a new corpus version from the inputs no version has
read yet, and optionally continue pretraining on it.

    RUN/corpora/tokenizer/tokenizer.json   the tokenizer of version 1 (RUN/tokenizer's when the run directory has
                                           one), adopted byte for byte by every later version
    RUN/corpora/v1/                        a shards directory (manifest.json, train/, heldout/, dedup_index.arrow)
    RUN/corpora/v2/                        version 2: its new documents only; manifest.parent names v1
    RUN/corpora/versions.json              per version: manifest sha256, inputs read, time (the refresh's ledger)
    RUN/continued/vN/                      continued pretraining on version N (with --continue-pretraining)

A refresh: verify every recorded version (a missing or altered manifest is refused, naming it) -> list the sources
(flows/watch.py) -> keep the files whose sha256 is not in the latest version's `inputs_seen`
(preprocessing.lineage, the one incremental core) -> nothing new: say so and stop; else run the preprocessing with
`corpus.parent` = the latest version into a build directory and publish it as the next version (atomic renames,
then the ledger). Two refreshes in a row with no new input: the second returns status "nothing_new".

    bertfactory refresh configs/local.yaml --run-dir runs/news --source /data/news/ [--continue-pretraining]
    python -c "from flows.refresh import corpus_refresh; corpus_refresh('configs/local.yaml', 'runs/news')"
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from bertfactory import storage
from bertfactory.errors import ContractError
from bertfactory.io import atomic_write_json, publish_dir, sha256_file
from preprocessing.lineage import NothingNew, plan_increment
from preprocessing.shards import MANIFEST_NAME

from .lock import secondary_rank
from .params import RefreshParams, flow_guard
from .recipe import Recipe, load_recipe
from .run_sync import working_copy
from .stages import _flow_run_name, _is_transient
from .watch import discover_all

logger = logging.getLogger("flows")

CORPORA = "corpora"
LEDGER = "versions.json"
_VERSION_DIR = re.compile(r"^v(\d+)$")


def version_dir(run_dir: Path, version: int) -> Path:
    return Path(run_dir) / CORPORA / f"v{version}"


def _read_ledger(root: Path) -> list[dict]:
    path = root / LEDGER
    if not path.is_file():
        return []
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["versions"]
        return sorted(entries, key=lambda e: int(e["version"]))
    except (ValueError, KeyError, TypeError) as err:
        raise ContractError(f"{path}: unreadable corpus-version ledger ({type(err).__name__}: {err}); restore it "
                            "from a backup, or remove the corpora directory to rebuild every version") from None


def _manifest_parent_sha(manifest: Path) -> str | None:
    try:
        parent = json.loads(manifest.read_text(encoding="utf-8")).get("parent")
    except ValueError:
        return None
    return parent.get("manifest_sha256") if parent else None


def check_versions(run_dir: Path) -> int:
    """The latest corpus version (0: none yet), after checking every recorded version's manifest is present and
    unchanged. A version published by a refresh that died before writing the ledger is adopted when it continues
    the chain; any other unrecorded version directory is refused."""
    root = Path(run_dir) / CORPORA
    ledger = _read_ledger(root)
    latest, latest_sha = 0, None
    for entry in ledger:
        version, manifest = int(entry["version"]), version_dir(run_dir, int(entry["version"])) / MANIFEST_NAME
        if version != latest + 1:
            raise ContractError(f"{root / LEDGER}: corpus versions are not consecutive ({latest} then {version})")
        if not manifest.is_file():
            raise ContractError(f"corpus version {version}: its manifest {manifest} is missing (recorded in "
                                f"{root / LEDGER}); restore it, or remove {root} to rebuild every version")
        sha = sha256_file(manifest)
        if sha != entry["manifest_sha256"]:
            raise ContractError(f"corpus version {version}: its manifest {manifest} was altered since it was written "
                                f"(sha256 {sha}, {LEDGER} records {entry['manifest_sha256']}); refusing to build on it. "
                                f"Restore it, or remove {root} to rebuild every version")
        latest, latest_sha = version, sha
    found = sorted(int(m.group(1)) for d in (root.iterdir() if root.is_dir() else [])
                   if d.is_dir() and (m := _VERSION_DIR.match(d.name)))
    for version in [v for v in found if v > latest]:
        manifest = version_dir(run_dir, version) / MANIFEST_NAME
        if version == latest + 1 and manifest.is_file() and _manifest_parent_sha(manifest) == latest_sha:
            logger.warning("corpus version %d at %s was published but not recorded (an interrupted refresh); "
                           "recording it", version, manifest.parent)
            _record(root, ledger, version, manifest, [])
            latest, latest_sha = version, sha256_file(manifest)
        else:
            raise ContractError(f"{manifest.parent}: a corpus version directory that {root / LEDGER} does not record "
                                f"and that does not continue version {latest}; move it away")
    return latest


def _pull_corpora(wc) -> None:
    """What a refresh reads of the versions so far: the ledger, the shared tokenizer, the run's own tokenizer, and
    each published version's manifest and dedup index (the next version deduplicates against them); not shards."""
    wc.pull([f"{CORPORA}/{LEDGER}", f"{CORPORA}/tokenizer/tokenizer.json", "tokenizer/tokenizer.json"])
    names = storage.list_files(wc.remote(CORPORA))
    wc.pull(sorted(f"{CORPORA}/{name}" for name in names
                   if _VERSION_DIR.match(name.split("/", 1)[0]) and name.count("/") == 1
                   and name.split("/", 1)[1] in (MANIFEST_NAME, "dedup_index.arrow")))


def _record(root: Path, ledger: list[dict], version: int, manifest: Path, new_inputs: list[str]) -> None:
    ledger.append({"version": version, "manifest_sha256": sha256_file(manifest), "new_inputs": new_inputs,
                   "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    atomic_write_json(root / LEDGER, {"versions": ledger})


def _nothing_new(run_dir: Path, latest: int, message: str) -> dict:
    logger.info("corpus_refresh: %s", message)
    corpus_dir = str(version_dir(run_dir, latest)) if latest else ""
    return {"status": "nothing_new", "version": latest, "corpus_dir": corpus_dir, "new_inputs": [], "pretrain": None,
            "message": message}


def refresh_corpus(recipe: Recipe, run_dir: Path, sources: list[str] | None = None) -> dict:
    """The refresh itself, without Prefect (the flow adds the lock, artifacts and continued pretraining)."""
    run_dir = Path(run_dir)
    root = run_dir / CORPORA
    wc = working_copy(run_dir)
    if wc is not None:  # a run on object storage: the ledger, the shared tokenizer, each version's manifest
        _pull_corpora(wc)
    latest = check_versions(run_dir)
    watched = list(sources) if sources else list(recipe.corpus.inputs)
    found = discover_all(watched, recipe.corpus, recipe.refresh, "refresh sources" if sources else "corpus.inputs")
    logger.info("corpus_refresh: %d input file(s) at %d watched location(s); latest corpus version %s",
                len(found), len(watched), latest or "none")
    if not found:
        return _nothing_new(run_dir, latest, f"nothing new: the watched locations {watched} offer no input file yet")
    parent = version_dir(run_dir, latest).resolve() if latest else None
    if parent is not None:
        try:
            new = plan_increment(str(parent), found).new_files
        except NothingNew as err:
            return _nothing_new(run_dir, latest, str(err))
    else:
        new = found
    version = latest + 1
    new_inputs = [f.location for f in new]
    logger.info("corpus_refresh: building corpus version %d from %d new input file(s): %s", version, len(new),
                ", ".join(new_inputs[:5]) + (" ..." if len(new) > 5 else ""))
    build = root / f".build-v{version}"
    shutil.rmtree(build, ignore_errors=True)  # a refresh that died mid-build: its staging is never complete
    corpus = recipe.corpus.model_copy(update={"inputs": new_inputs, "parent": str(parent) if parent else None})
    preprocess = recipe.preprocess
    run_tokenizer = run_dir / "tokenizer" / "tokenizer.json"
    if version == 1 and preprocess.tokenizer.path is None and run_tokenizer.is_file():
        # the run directory's own pipeline made a tokenizer (and maybe a model with it): keep its token ids, so
        # continued pretraining can start from RUN/pretrain/final
        logger.info("corpus_refresh: version 1 adopts the run directory's tokenizer %s", run_tokenizer)
        tokenizer_cfg = preprocess.tokenizer.model_copy(update={"path": str(run_tokenizer.resolve())})
        preprocess = preprocess.model_copy(update={"tokenizer": tokenizer_cfg})
    from preprocessing.pipeline import run_preprocess

    manifest = run_preprocess(corpus, preprocess, build)
    tokenizer = root / "tokenizer" / "tokenizer.json"
    if version == 1:
        publish_dir(build / "tokenizer", root / "tokenizer")
    elif sha256_file(build / "tokenizer" / "tokenizer.json") != sha256_file(tokenizer):
        raise ContractError(f"corpus version {version} was built with another tokenizer than {tokenizer}; "
                            "versions must share one (preprocessing adopts the parent's)")
    publish_dir(build / "shards", version_dir(run_dir, version))
    shutil.rmtree(build, ignore_errors=True)
    _record(root, _read_ledger(root), version, version_dir(run_dir, version) / MANIFEST_NAME, new_inputs)
    if wc is not None and not secondary_rank():  # the version (manifest last), then the ledger that records it
        wc.push_tree(f"{CORPORA}/tokenizer")
        wc.push_tree(f"{CORPORA}/v{version}", last=(MANIFEST_NAME,))
        wc.push([f"{CORPORA}/{LEDGER}"])
    logger.info("corpus_refresh: corpus version %d written to %s (%s documents kept)", version,
                version_dir(run_dir, version), manifest["counts"].get("docs_kept"))
    return {"status": "new_version", "version": version, "corpus_dir": str(version_dir(run_dir, version)),
            "new_inputs": new_inputs, "pretrain": None, "counts": manifest["counts"]}


@task(name="corpus_version", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[10, 60],
      retry_condition_fn=_is_transient)
def corpus_version_task(recipe_json: dict, run_dir: str, sources: list[str] | None) -> dict:
    """One refresh, retried on transient failures only (its build directory is cleared first, so a retry is clean)."""
    return refresh_corpus(Recipe.model_validate(recipe_json), Path(run_dir), sources)


@task(name="stage", task_run_name="continued-pretrain", cache_policy=NO_CACHE, retries=2,
      retry_delay_seconds=[10, 60], retry_condition_fn=_is_transient)
def continued_task(recipe_json: dict, run_dir: str, version: int) -> str | None:
    """Continued pretraining on corpus `version` (flows/continued.py), retried on transient failures (it resumes
    from its last checkpoint)."""
    from .continued import continue_pretraining

    return continue_pretraining(Recipe.model_validate(recipe_json), Path(run_dir), version)


@flow(name="corpus_refresh", flow_run_name=_flow_run_name, log_prints=True, validate_parameters=True)
def corpus_refresh(config: str, run_dir: str, sources: list[str] | None = None, overrides: list[str] | None = None,
                   continue_pretraining: bool = False) -> dict:
    """Build the next corpus version of `run_dir` from inputs at `sources` that no version has read yet."""
    with flow_guard("corpus_refresh", RefreshParams, config=config, run_dir=run_dir, sources=sources,
                    overrides=overrides, continue_pretraining=continue_pretraining) as params:
        recipe = load_recipe(params.config, params.overrides)
        result = corpus_version_task(recipe.model_dump(mode="json"), str(Path(params.run_dir).resolve()), params.sources)
        if params.continue_pretraining and result["version"]:
            # also after "nothing new": an interrupted continuation of the latest version resumes here
            result["pretrain"] = continued_task(recipe.model_dump(mode="json"), str(Path(params.run_dir).resolve()),
                                                result["version"])
        from .artifacts import publish_refresh_artifacts

        publish_refresh_artifacts(Path(params.run_dir), result)
        return result
