"""XLM's loaders (Lample & Conneau 2019): each row's language mapped onto the model's language embeddings, and the
joint MLM + TLM schedule of the paper (section 3.3/5: "when training with TLM, we alternate between MLM and TLM").

    batches = prepare_batches(batches, model_cfg, pretrain_cfg, run_dir)   # training/pretrain_data.py, XLM objectives

Languages. Preprocessing stores a language per row (shard schema v2: `lang_a`/`lang_b`, ids into the manifest's
`instance_format.languages`, the sorted codes of the corpus). The model's embedding rows are `model.xlm.languages`
(XLM's --lgs) when the recipe names them — a row's code picks its embedding, whatever shard set it comes from —
else the train shards' own ids. `language_map` turns manifest ids into model rows once; the loader
(training/data.py `language_inputs`) then writes every token's row into the batch's `language_ids`. Shards of
schema v1 (no language column) and, without model.xlm.languages, shards of one language keep the single
`model.xlm.language_id` (the model fills it in).

The joint schedule (objective `xlm_mlm_tlm`). Two shard sets, one trainer loop: the run's shards (RUN/shards: a
monolingual instance format of a multilingual corpus, languages alpha-sampled by preprocess.language_sampling)
feed MLM, and `pretrain.tlm_shards` (a tlm-pairs shard set built from a parallel corpus with the run's tokenizer)
feeds TLM. Optimiser step s trains MLM on batch s // 2 of the monolingual set when s is even and TLM on batch
s // 2 of the pair set when s is odd (XLM's trainer likewise takes one optimiser step per objective in turn:
train.py's loop over --mlm_steps 'en,fr,en-fr'). Each set keeps its own epochs and mask variants
(PretrainBatches of training/data.py, same seed), so a step's batch is a pure function of the step: resuming and
data parallelism (every rank takes its slice of both kinds of global batch) work as for one set. Why two sets and
not one holding both kinds of rows: the paper's MLM text is monolingual (Wikipedia) and its TLM text parallel
(MultiUN, OPUS, ...) — two corpora of different formats, each preprocessed as it is read (corpus.format is one
per run) — and a batch must be all MLM or all TLM. The objective tells the two apart by the TLM batch's
`position_ids` (training/objectives/xlm.py). Build the pair set into a directory of its own:

    bertfactory preprocess configs/tiny-xlm.yaml --run-dir R
    bertfactory preprocess configs/tiny-xlm-tlm.yaml --run-dir R/tlm --tokenizer R/tokenizer/tokenizer.json
    bertfactory pretrain configs/tiny-xlm.yaml --run-dir R --set pretrain.objective=xlm_mlm_tlm \
        --set pretrain.tlm_shards=tlm/shards
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from bertfactory.errors import ConfigError, ContractError

from .data import Position, PretrainBatches

TLM_FORMAT = "tlm-pairs"


def manifest_languages(batches: PretrainBatches) -> list[str] | None:
    """The shard set's language codes (instance_format.languages; None: a manifest written before schema v2)."""
    languages = batches.shards.manifest.instance_format.get("languages")
    return list(languages) if languages else None


def language_map(shard_languages: Sequence[str], model_languages: Sequence[str], source: str,
                 listed_by: str = "model.xlm.languages") -> np.ndarray:
    """manifest id -> model embedding row: the row of each shard language's code in model_languages."""
    missing = [code for code in shard_languages if code not in model_languages]
    if missing:
        raise ConfigError(f"{source} holds rows in language(s) {', '.join(missing)}, which {listed_by} "
                          f"[{', '.join(model_languages)}] does not list; name every language of both shard sets "
                          "in model.xlm.languages (and model.num_languages as many)")
    return np.asarray([list(model_languages).index(code) for code in shard_languages], dtype=np.int64)


def _map_languages(batches: PretrainBatches, model_languages: Sequence[str] | None, num_languages: int,
                   source: str) -> None:
    """Set `batches.language_map` (and turn per-row languages on where a named list needs them); refuse ids the
    model has no embedding for."""
    codes = manifest_languages(batches)
    if codes is None:  # schema v1: no language per row, every token model.xlm.language_id
        if batches.translation:
            raise ContractError(f"{source}: tlm-pairs shards without instance_format.languages")
        return
    if model_languages is not None:
        batches.language_map = language_map(codes, model_languages, source)
        batches.row_languages = True
        return
    if batches.row_languages and len(codes) > num_languages:
        raise ConfigError(f"{source} holds {len(codes)} languages ({', '.join(codes)}), more than the "
                          f"model.num_languages={num_languages} language embeddings; raise num_languages or name "
                          "the model's languages in model.xlm.languages")


class AlternatingBatches:
    """Objective xlm_mlm_tlm's loader: even steps MLM batches of `mlm`, odd steps TLM batches of `tlm` (module
    docstring). Looks like a PretrainBatches to the trainer; `shards`, `rows` and epochs are the MLM set's."""

    def __init__(self, mlm: PretrainBatches, tlm: PretrainBatches):
        if mlm.pad_id != tlm.pad_id:
            raise ContractError(f"the MLM and TLM shards pad with different ids ({mlm.pad_id}, {tlm.pad_id}); "
                                "build both with the same tokenizer")
        self.mlm, self.tlm = mlm, tlm
        self.shards, self.rows, self.seed, self.pad_id = mlm.shards, mlm.rows, mlm.seed, mlm.pad_id
        self.batch_size, self.local_batch_size = mlm.batch_size, mlm.local_batch_size
        self.rank, self.world_size = mlm.rank, mlm.world_size
        self.steps_per_epoch = 2 * mlm.steps_per_epoch  # optimiser steps per MLM epoch

    def source(self, step: int) -> tuple[PretrainBatches, int]:
        """The loader and its own step that global step `step` reads."""
        if step < 0:
            raise ValueError(f"step must be >= 0 (got {step})")
        return (self.tlm if step % 2 else self.mlm), step // 2

    def position(self, step: int) -> Position:
        batches, own = self.source(step)
        pos = batches.position(own)
        return Position(step, pos.epoch, pos.batch_in_epoch, pos.variant)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        batches, own = self.source(step)
        return batches.batch(own)

    def iter_from(self, step: int):
        while True:
            yield self.batch(step)
            step += 1


def prepare_batches(batches: Any, model_cfg: Any, cfg: Any, run_dir: Path) -> Any:
    """The pretrain stage's hook for XLM objectives: map languages (module docstring) and, for xlm_mlm_tlm, add
    the TLM shard set `pretrain.tlm_shards` (relative to the run directory) in alternation."""
    if not isinstance(batches, PretrainBatches):
        raise ConfigError(f"objective {cfg.objective} reads languages per row, which pretrain.batch_size_ramp's "
                          "loader does not; train XLM without the ramp")
    xlm = model_cfg.xlm
    model_languages = xlm.languages if xlm is not None else None
    _map_languages(batches, model_languages, model_cfg.num_languages, f"{batches.shards.directory}/manifest.json")
    if cfg.objective != "xlm_mlm_tlm":
        if cfg.tlm_shards is not None:
            raise ConfigError(f"pretrain.tlm_shards is read by objective xlm_mlm_tlm only (objective is "
                              f"{cfg.objective})")
        return batches
    if cfg.tlm_shards is None:
        raise ConfigError("objective xlm_mlm_tlm alternates MLM on the run's shards with TLM on a tlm-pairs shard "
                          "set: set pretrain.tlm_shards to its directory (built with this run's tokenizer, e.g. "
                          "`bertfactory preprocess RECIPE --run-dir RUN/tlm --tokenizer RUN/tokenizer/tokenizer.json`)")
    tlm_dir = Path(cfg.tlm_shards) if Path(cfg.tlm_shards).is_absolute() else Path(run_dir) / cfg.tlm_shards
    source = f"pretrain.tlm_shards {tlm_dir}/manifest.json"
    if not (tlm_dir / "manifest.json").is_file():
        raise ConfigError(f"pretrain.tlm_shards: no shard set at {tlm_dir} (no manifest.json)")
    tlm = PretrainBatches.open(tlm_dir, batches.shards.manifest.tokenizer.sha256, batches.batch_size, batches.seed,
                               verify=cfg.verify_shards, rank=batches.rank, world_size=batches.world_size,
                               length_buckets=cfg.length_buckets, bucket_window=cfg.bucket_window)
    if not tlm.translation:
        raise ContractError(f"{source}: instance format {tlm.shards.manifest.instance_format.get('name')!r}, but "
                            f"objective xlm_mlm_tlm reads TLM batches from {TLM_FORMAT!r} shards")
    if batches.translation:
        raise ContractError(f"{batches.shards.directory}/manifest.json: objective xlm_mlm_tlm trains MLM on the "
                            "run's shards, which hold tlm-pairs; build them from monolingual text")
    longest = int(tlm.shards.lengths().max())
    if longest > model_cfg.max_position_embeddings:
        raise ConfigError(f"model.max_position_embeddings={model_cfg.max_position_embeddings} is shorter than the "
                          f"longest pair of {source} ({longest} tokens)")
    if model_languages is None:  # the MLM set's ids are the embedding rows: the pairs' codes must be among them
        if not batches.row_languages:
            raise ConfigError(f"{batches.shards.directory} has no languages per row (one language, or schema v1): "
                              "name the model's languages in model.xlm.languages to train TLM pairs beside it")
        tlm.language_map = language_map(manifest_languages(tlm) or [], manifest_languages(batches) or [], source,
                                        listed_by=f"the run's shards' instance_format.languages")
    else:
        _map_languages(tlm, model_languages, model_cfg.num_languages, source)
    return AlternatingBatches(batches, tlm)
