"""`bertfactory inspect SHARD_DIR`: what a shard directory holds (from its manifest) and one instance decoded
with its masks, so a person can check the data the model will see. The shards are validated as the training
reader validates them (sha256 of every shard, the tokenizer's sha256 against the manifest's)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from bertfactory.errors import ContractError, InputError
from bertfactory.io import sha256_file
from preprocessing.shards import MANIFEST_NAME, ShardSet, read_manifest

from .summary import fmt


def _shard_dir(path: Path) -> Path:
    if path.name == MANIFEST_NAME and path.is_file():  # the manifest itself: its shard directory
        return path.parent
    if not path.exists():  # a mistyped path: not a stage to run first
        raise InputError(f"{path}: no such directory (give a shard directory, RUN/shards, or a run directory)")
    if (path / MANIFEST_NAME).is_file():
        return path
    if (path / "shards" / MANIFEST_NAME).is_file():
        return path / "shards"
    raise ContractError(f"no {MANIFEST_NAME} in {path} or {path / 'shards'}; run `bertfactory preprocess` first")


def _manifest_tokenizer(directory: Path) -> Path:
    """The tokenizer.json the manifest names (relative to the shard directory), which must exist."""
    path = (directory / read_manifest(directory).tokenizer.path).resolve()
    if not path.is_file():
        raise ContractError(f"{directory / MANIFEST_NAME} names the tokenizer {path}, which does not exist; the shards "
                            "cannot be decoded without the tokenizer they were built with")
    return path


def inspect_shards(path: Path, split: str = "train", index: int = 0, variant: int = 0) -> str:
    directory = _shard_dir(Path(path))
    tok_path = _manifest_tokenizer(directory)
    # the training reader's check (training.data opens the shards the same way): the tokenizer on disk must be
    # the one the shards were built with, else the ids would decode to other tokens or to none at all
    shards = ShardSet.open(directory, split, tokenizer_sha256=sha256_file(tok_path), verify=True)
    m = shards.manifest
    tokenizer = Tokenizer.from_file(str(tok_path))
    out = [f"shards: {directory}  (schema v{m.schema_version}, {m.created_by})"]
    out.append(f"tokenizer: {tok_path}  vocab {m.tokenizer.vocab_size:,}  sha256 {m.tokenizer.sha256[:16]}…")
    out.append(f"instances: {m.instance_format}")
    out.append(f"masking: {m.masking}")
    out.append(f"seed {m.seed}  config {m.config_hash[:16]}…  runner {m.runner}")
    out.append("counts:")
    for k, v in m.counts.items():
        out.append(f"  {k}: {v if isinstance(v, dict) else fmt(v)}")
    for name, info in m.splits.items():
        out.append(f"split {name}: {info.rows:,} rows, {info.tokens:,} tokens, {len(info.shards)} shard(s)")
    if len(shards) == 0:
        return "\n".join(out + [f"(split {split} is empty)"])
    if not -len(shards) <= index < len(shards):
        raise InputError(f"--index {index}: split {split} of {directory} has {len(shards):,} rows (indices 0 to "
                         f"{len(shards) - 1:,}, or -1 for the last)")
    index %= len(shards)
    inst = shards.instance(index, variant)
    if shards.k == 0:  # dynamic masking: the masks the training loader draws for this row in epoch `variant`
        from training.data import dynamic_masker, masked_at_read_time

        inst = masked_at_read_time(dynamic_masker(shards), inst, variant, index, shards.span_bounds)
    ids = [int(i) for i in inst.input_ids]
    toks = [tokenizer.id_to_token(i) for i in ids]
    label = {0: "IsNext", 1: "NotNext (random B)"}.get(inst.nsp_label, str(inst.nsp_label))
    out.append("")
    out.append(f"{split}[{index}]  doc {inst.doc_id}  {len(ids)} tokens  len_a {inst.len_a}  nsp_label {inst.nsp_label} = {label}")
    out.append("  A: " + " ".join(toks[: inst.len_a]))
    out.append("  B: " + " ".join(toks[inst.len_a :]))
    mask_id = m.tokenizer.special_ids.get("mask")
    changes = []
    for pos, new in zip(inst.mask_positions.tolist(), inst.mask_tokens.tolist()):
        orig = toks[pos]
        if new == mask_id:
            kind = "[MASK]"
        elif new == ids[pos]:
            kind = "kept"
        else:
            kind = f"random {tokenizer.id_to_token(new)!r}"
        changes.append(f"{pos}:{orig!r}->{kind}")
    which = (f"variant {variant % shards.k} of {shards.k}" if shards.k
             else f"dynamic masks of epoch {variant} (drawn at read time)")
    out.append(f"  {which}: {len(changes)} masked: " + ", ".join(changes))
    shown = list(toks)
    for pos, new in zip(inst.mask_positions.tolist(), inst.mask_tokens.tolist()):
        shown[pos] = f"<{tokenizer.id_to_token(new)}>"
    out.append("  model input: " + " ".join(shown))
    return "\n".join(out)
