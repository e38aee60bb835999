"""Incremental corpus versions: given an existing corpus (its shards directory) and input files, find the inputs it
has not read, and hand the pipeline what version N+1 must share with it — the tokenizer (token ids must mean the
same thing in every version) and the near-duplicate index (new documents are deduplicated against every older one).

A version lists its parent (path, manifest sha256, version number) and `inputs_seen`, the sha256 of every input
file read by it and its ancestors: a file is new when its content has not been read, whatever its name. The parent
is verified before anything runs — manifest valid, tokenizer, dedup index and every shard matching the sha256 the
manifest records — so a refresh never builds on a corpus that changed under it.

    bertfactory preprocess --input dumps/ --format jsonl --parent runs/v1/shards --out runs/v2
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from bertfactory import run_location
from bertfactory.errors import BertfactoryError, ContractError
from bertfactory.io import sha256_file
from bertfactory.shard_cache import ShardCache

from .shards import MANIFEST_NAME, Manifest, ParentInfo, read_manifest

logger = logging.getLogger(__name__)


class NothingNew(BertfactoryError):
    """Every input was already read by the parent corpus version: there is nothing to build."""


@dataclass
class Increment:
    parent_dir: Path
    parent: Manifest
    manifest_sha256: str
    new_files: list  # Path or preprocessing.inputs.InputFile, as given
    skipped: list
    input_sha256: dict

    @property
    def version(self) -> int:
        return self.parent.corpus_version + 1

    @property
    def tokenizer_path(self) -> Path:
        return (self.parent_dir / self.parent.tokenizer.path).resolve()

    @property
    def dedup_index_path(self) -> Path | None:
        return self.parent_dir / self.parent.dedup_index.path if self.parent.dedup_index else None

    def parent_info(self, given: str) -> ParentInfo:
        return ParentInfo(path=given, manifest_sha256=self.manifest_sha256, corpus_version=self.parent.corpus_version)

    def inputs_seen(self) -> list[str]:
        return sorted(set(seen_inputs(self.parent)) | {self.input_sha256[p] for p in self.new_files})


def seen_inputs(manifest: Manifest) -> list[str]:
    """The sha256 of every input a corpus version has read (older manifests: its own sources)."""
    return manifest.inputs_seen or sorted({s.sha256 for s in manifest.sources})


def _check_file(path: Path, sha256: str, what: str, parent_dir: Path) -> None:
    if not path.is_file() and (url := run_location.remote_of(path)) is not None:
        # a parent on object storage keeps its shards there, not in the working copy: fetched through the shard
        # cache, which verifies the manifest's sha256 (StorageError naming the URL when it is gone)
        ShardCache().fetch(url, sha256)
        return
    if not path.is_file():
        raise ContractError(f"parent corpus {parent_dir}: its {what} {path} is missing")
    got = sha256_file(path)
    if got != sha256:
        raise ContractError(f"parent corpus {parent_dir}: its {what} {path} changed since the parent's manifest was "
                            f"written (sha256 {got}, manifest {sha256}); rebuild the parent or pick another")


def verify_parent(parent_dir: Path) -> tuple[Manifest, str]:
    """The parent's manifest and its sha256, after checking that nothing the manifest lists has changed."""
    manifest_path = parent_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        raise ContractError(f"corpus.parent {parent_dir}: no {MANIFEST_NAME} there; give the shards directory of an "
                            f"existing corpus version (RUN/shards)")
    manifest = read_manifest(parent_dir)
    _check_file((parent_dir / manifest.tokenizer.path).resolve(), manifest.tokenizer.sha256, "tokenizer", parent_dir)
    if manifest.dedup_index is not None:
        _check_file(parent_dir / manifest.dedup_index.path, manifest.dedup_index.sha256, "dedup index", parent_dir)
    for split in manifest.splits.values():
        for shard in split.shards:
            _check_file(parent_dir / shard.path, shard.sha256, "shard", parent_dir)
    return manifest, sha256_file(manifest_path)


def plan_increment(parent: str, paths: list, sha256_of=None) -> Increment:
    """Which of `paths` (local paths or preprocessing.inputs.InputFile) version N+1 reads. NothingNew when the
    parent has read them all."""
    parent_dir = Path(parent).expanduser()
    manifest, manifest_sha = verify_parent(parent_dir)
    seen = set(seen_inputs(manifest))
    shas = {p: (p.sha256() if hasattr(p, "sha256") else sha256_file(p)) for p in paths}
    new = [p for p in paths if shas[p] not in seen]
    skipped = [p for p in paths if shas[p] in seen]
    if not new:
        raise NothingNew(f"nothing new: all {len(paths)} input file(s) were already read by corpus version "
                         f"{manifest.corpus_version} at {parent_dir}")
    logger.info("incremental: corpus version %d -> %d: %d new input file(s), %d already read", manifest.corpus_version,
                manifest.corpus_version + 1, len(new), len(skipped))
    return Increment(parent_dir, manifest, manifest_sha, new, skipped, shas)
