"""Training objectives of the family. An objective is a loss function `(model, batch) -> dict` with a scalar
`loss` to minimise plus scalar metrics (`mlm_loss`, `nsp_loss`, `mlm_correct`, `mlm_count`, ...) that the trainer
averages into metrics.jsonl, and an `ObjectiveSpec` saying which architecture it trains and which shards it can
read. `pretrain.objective` names one.

Adding an objective = one small module with the loss function and one `ObjectiveSpec` registered below.

    from training.objectives import get_objective_spec
    spec = get_objective_spec("mlm_sop")
    spec.check_shards(manifest, "RUN/shards/manifest.json")   # ContractError when the shards cannot feed it
    out = spec.loss(model, batch)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from bertfactory.errors import ContractError

from .electra import electra
from .mlm import mlm_only
from .mlm_nsp import mlm_nsp
from .plm import permutation_lm
from .txl import recurrent_clm
from .sbo import mlm_sbo
from .sop import mlm_sop
from ..xlm_data import prepare_batches as prepare_xlm_batches
from .xlm import clm, tlm, xlm_mlm, xlm_mlm_tlm

Objective = Callable[[torch.nn.Module, dict[str, torch.Tensor]], dict[str, torch.Tensor | None]]

# What a shard set of schema v1 without `instance_format.name` holds (the foundation's only format).
DEFAULT_INSTANCE_FORMAT = "nsp-pairs"
# Instance formats whose rows carry precomputed masks over real text (anything but parallel/causal layouts).
MASKED_TEXT_FORMATS = ("nsp-pairs", "sop-pairs", "full-sentences", "doc-sentences", "single-segment")


@dataclass(frozen=True)
class ObjectiveSpec:
    name: str
    loss: Objective
    architecture: str  # training.models.registry name of the model it trains
    instance_formats: tuple[str, ...]  # shard instance formats it can train on
    needs: str  # what it reads from a row, for error messages, e.g. "sentence-order labels (shard field nsp_label)"
    description: str
    # (batches, model config, pretrain config, run dir) -> the loader to train on: the pretrain stage's hook for
    # objectives whose batches need more than the run's shards (XLM: languages per row, TLM pairs beside MLM)
    prepare_batches: Callable[[Any, Any, Any, Any], Any] | None = None
    # it trains a sentence-pair head (NSP / SOP) on the pooled [CLS]; the model is built with one only then
    sentence_head: bool = False

    def configure(self, arch_config: Any) -> Any:
        """The architecture's config with only the heads this objective trains (a config with a `sentence_head`
        field gets this objective's value; other architectures are returned unchanged)."""
        if dataclasses.is_dataclass(arch_config) and any(f.name == "sentence_head"
                                                         for f in dataclasses.fields(arch_config)):
            return dataclasses.replace(arch_config, sentence_head=self.sentence_head)
        return arch_config

    def check_shards(self, manifest: Any, source: str) -> None:
        """Refuse shards built for another objective, naming the manifest field and the format(s) needed."""
        fmt = instance_format_name(manifest)
        if fmt not in self.instance_formats:
            raise ContractError(
                f"{source}: the shards were built as instance format {fmt!r} (field instance_format.name), but "
                f"objective {self.name!r} needs {self.needs}, which only instance format(s) "
                f"{', '.join(self.instance_formats)} provide; rebuild the shards with one of them "
                f"(preprocess.instances.format) or choose another pretrain.objective"
            )


def instance_format_name(manifest: Any) -> str:
    fmt = manifest.instance_format if hasattr(manifest, "instance_format") else manifest["instance_format"]
    name = fmt.get("name", DEFAULT_INSTANCE_FORMAT) if isinstance(fmt, Mapping) else DEFAULT_INSTANCE_FORMAT
    return str(name)


_OBJECTIVES: dict[str, ObjectiveSpec] = {}


def register_objective(spec: ObjectiveSpec) -> ObjectiveSpec:
    _OBJECTIVES[spec.name] = spec
    return spec


register_objective(ObjectiveSpec(
    name="mlm_nsp", loss=mlm_nsp, architecture="BertForPreTraining", instance_formats=("nsp-pairs",),
    needs="masked tokens and next-sentence labels (shard fields mask_positions/mask_tokens and nsp_label)",
    description="BERT: masked LM + next-sentence prediction", sentence_head=True,
))
register_objective(ObjectiveSpec(
    name="mlm", loss=mlm_only, architecture="BertForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
    needs="masked tokens (shard fields mask_positions/mask_tokens)",
    description="RoBERTa: masked LM only, no sentence-pair loss",
))
register_objective(ObjectiveSpec(
    name="mlm_sop", loss=mlm_sop, architecture="BertForPreTraining", instance_formats=("sop-pairs",),
    needs="masked tokens and sentence-order labels (shard fields mask_positions/mask_tokens and nsp_label)",
    description="ALBERT: masked LM + sentence-order prediction", sentence_head=True,
))
register_objective(ObjectiveSpec(
    name="electra", loss=electra, architecture="ElectraForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
    needs="masked tokens (shard fields mask_positions/mask_tokens)",
    description="ELECTRA: generator masked LM + disc_weight * replaced-token detection at every token "
                "(model.electra: generator size, weight, two-stage)",
))
# SpanBERT trains single segments; any format of contiguous real text feeds MLM + SBO, whose targets are the
# masked spans (best built with preprocess.masking.policy span). nsp-pairs are accepted because the loss never
# reads nsp_label and the [SEP] between A and B only bounds spans;
# sop-pairs are not: half their rows put B before A, text order no loss here accounts for.
register_objective(ObjectiveSpec(
    name="mlm_sbo", loss=mlm_sbo, architecture="SpanBertForPreTraining",
    instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs"),
    needs="masked spans (shard fields mask_positions/mask_tokens; preprocess.masking.policy span)",
    description="SpanBERT: masked LM + span boundary objective, no NSP",
))
# XLM (objectives in training/objectives/xlm.py). clm and xlm_mlm read monolingual shards of contiguous text
# (each row's language from multilingual shards, else model.xlm.language_id); tlm reads tlm-pairs shards
# (schema v2: lang_a/lang_b per row, turned into per-token language and restarting position ids by
# training.data.translation_inputs); xlm_mlm_tlm alternates the two (training/xlm_data.py: languages mapped
# onto model.xlm.languages, the pair set pretrain.tlm_shards).
register_objective(ObjectiveSpec(
    name="clm", loss=clm, architecture="XlmForPreTraining",
    instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs", "clm"),
    needs="text in order (shard field input_ids; the masks are undone)",
    description="XLM: causal LM, predicting the next token at every position (each row's language)",
    prepare_batches=prepare_xlm_batches,
))
register_objective(ObjectiveSpec(
    name="xlm_mlm", loss=xlm_mlm, architecture="XlmForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
    needs="masked tokens (shard fields mask_positions/mask_tokens)",
    description="XLM: monolingual masked LM with language embeddings (each row's language)",
    prepare_batches=prepare_xlm_batches,
))
register_objective(ObjectiveSpec(
    name="tlm", loss=tlm, architecture="XlmForPreTraining", instance_formats=("tlm-pairs",),
    needs="aligned sentence pairs with a language per side (shard fields lang_a/lang_b, schema v2)",
    description="XLM: translation LM, masked LM over [CLS] source [SEP] target [SEP] with per-token languages "
                "and positions restarting at the target",
    prepare_batches=prepare_xlm_batches,
))
register_objective(ObjectiveSpec(
    name="xlm_mlm_tlm", loss=xlm_mlm_tlm, architecture="XlmForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
    needs="masked tokens of monolingual text (shard fields mask_positions/mask_tokens; the pairs come from "
          "pretrain.tlm_shards)",
    description="XLM: MLM on the run's shards and TLM on the pair shards pretrain.tlm_shards in alternate steps",
    prepare_batches=prepare_xlm_batches,
))

# XLNet and Transformer-XL undo the stored masks and read the text itself; a NotNext B segment of nsp-pairs is
# another document's text, which the causal loss does not predict across (see training/objectives/txl.py)
register_objective(ObjectiveSpec(
    name="plm", loss=permutation_lm, architecture="XLNetForPreTraining",
    instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs", "clm"),
    needs="text (shard field input_ids; the stored masks are undone)",
    description="XLNet: permutation LM, two-stream attention, the last 1/K of each factorisation order predicted",
))
register_objective(ObjectiveSpec(
    name="txl_clm", loss=recurrent_clm, architecture="TransformerXLLM",
    instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs", "clm"),
    needs="text in order (shard field input_ids; the stored masks are undone)",
    description="Transformer-XL: causal LM over consecutive segments of each instance with a carried memory",
))

# ModernBERT: masked LM alone, as RoBERTa's `mlm`, on its own architecture (30 % masking is the recipe's
# preprocess.masking.masked_lm_prob)
register_objective(ObjectiveSpec(
    name="modernbert_mlm", loss=mlm_only, architecture="ModernBertForMaskedLM", instance_formats=MASKED_TEXT_FORMATS,
    needs="masked tokens (shard fields mask_positions/mask_tokens)",
    description="ModernBERT: masked LM only (rotary, alternating global / sliding-window attention, GeGLU)",
))


def objective_names() -> list[str]:
    return sorted(_OBJECTIVES)


def get_objective_spec(name: str) -> ObjectiveSpec:
    if name not in _OBJECTIVES:
        raise KeyError(f"unknown objective '{name}'; known: {', '.join(objective_names())}")
    return _OBJECTIVES[name]


def get_objective(name: str) -> Objective:
    return get_objective_spec(name).loss


OBJECTIVES = _OBJECTIVES  # read-only view for callers that list them
