"""What each pretraining objective is, without its loss function: the architecture it trains, the shard instance
formats it reads, and its descriptions. Declared without torch, so that a recipe's `pretrain.objective` and its
cross-checks (training/pretrain_config.py, training/recipe_checks.py) validate when the recipe loads without
importing a model; training/objectives/ pairs each entry with its loss (`ObjectiveSpec`, which extends
`ObjectiveInfo`).

    from training.objective_catalog import objective_info, objective_names
    objective_info("mlm_sop").architecture   # 'BertForPreTraining'

Adding an objective = its entry here, and its loss function in training/objectives/ (registered there by name).
"""

from __future__ import annotations

from dataclasses import dataclass

# Instance formats whose rows carry precomputed masks over real text (anything but parallel/causal layouts).
MASKED_TEXT_FORMATS = ("nsp-pairs", "sop-pairs", "full-sentences", "doc-sentences", "single-segment")


@dataclass(frozen=True)
class ObjectiveInfo:
    name: str
    architecture: str  # training.models.registry name of the model it trains
    instance_formats: tuple[str, ...]  # shard instance formats it can train on
    needs: str  # what it reads from a row, for error messages, e.g. "sentence-order labels (shard field nsp_label)"
    description: str
    # it trains a sentence-pair head (NSP / SOP) on the pooled [CLS]; the model is built with one only then
    sentence_head: bool = False


_CATALOG: dict[str, ObjectiveInfo] = {}


def _declare(info: ObjectiveInfo) -> None:
    _CATALOG[info.name] = info


_declare(ObjectiveInfo(
    name="mlm_nsp", architecture="BertForPreTraining", instance_formats=("nsp-pairs",),
    needs="masked tokens and next-sentence labels (shard fields mask_positions/mask_tokens and nsp_label)",
    description="BERT: masked LM + next-sentence prediction", sentence_head=True,
))
_declare(ObjectiveInfo(
    name="mlm", architecture="BertForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
    needs="masked tokens (shard fields mask_positions/mask_tokens)",
    description="RoBERTa: masked LM only, no sentence-pair loss",
))
_declare(ObjectiveInfo(
    name="mlm_sop", architecture="BertForPreTraining", instance_formats=("sop-pairs",),
    needs="masked tokens and sentence-order labels (shard fields mask_positions/mask_tokens and nsp_label)",
    description="ALBERT: masked LM + sentence-order prediction", sentence_head=True,
))
_declare(ObjectiveInfo(
    name="electra", architecture="ElectraForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
    needs="masked tokens (shard fields mask_positions/mask_tokens)",
    description="ELECTRA: generator masked LM + disc_weight * replaced-token detection at every token "
                "(model.electra: generator size, weight, two-stage)",
))
# SpanBERT trains single segments; any format of contiguous real text feeds MLM + SBO, whose targets are the
# masked spans (best built with preprocess.masking.policy span). nsp-pairs are accepted because the loss never
# reads nsp_label and the [SEP] between A and B only bounds spans;
# sop-pairs are not: half their rows put B before A, text order no loss here accounts for.
_declare(ObjectiveInfo(
    name="mlm_sbo", architecture="SpanBertForPreTraining",
    instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs"),
    needs="masked spans (shard fields mask_positions/mask_tokens; preprocess.masking.policy span)",
    description="SpanBERT: masked LM + span boundary objective, no NSP",
))
# XLM (objectives in training/objectives/xlm.py). clm and xlm_mlm read monolingual shards of contiguous text
# (each row's language from multilingual shards, else model.xlm.language_id); tlm reads tlm-pairs shards
# (schema v2: lang_a/lang_b per row, turned into per-token language and restarting position ids by
# training.data.translation_inputs); xlm_mlm_tlm alternates the two (training/xlm_data.py: languages mapped
# onto model.xlm.languages, the pair set pretrain.tlm_shards).
_declare(ObjectiveInfo(
    name="clm", architecture="XlmForPreTraining",
    instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs", "clm"),
    needs="text in order (shard field input_ids; the masks are undone)",
    description="XLM: causal LM, predicting the next token at every position (each row's language)",
))
_declare(ObjectiveInfo(
    name="xlm_mlm", architecture="XlmForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
    needs="masked tokens (shard fields mask_positions/mask_tokens)",
    description="XLM: monolingual masked LM with language embeddings (each row's language)",
))
_declare(ObjectiveInfo(
    name="tlm", architecture="XlmForPreTraining", instance_formats=("tlm-pairs",),
    needs="aligned sentence pairs with a language per side (shard fields lang_a/lang_b, schema v2)",
    description="XLM: translation LM, masked LM over [CLS] source [SEP] target [SEP] with per-token languages "
                "and positions restarting at the target",
))
_declare(ObjectiveInfo(
    name="xlm_mlm_tlm", architecture="XlmForPreTraining", instance_formats=MASKED_TEXT_FORMATS,
    needs="masked tokens of monolingual text (shard fields mask_positions/mask_tokens; the pairs come from "
          "pretrain.tlm_shards)",
    description="XLM: MLM on the run's shards and TLM on the pair shards pretrain.tlm_shards in alternate steps",
))

# XLNet and Transformer-XL undo the stored masks and read the text itself; a NotNext B segment of nsp-pairs is
# another document's text, which the causal loss does not predict across (see training/objectives/txl.py)
_declare(ObjectiveInfo(
    name="plm", architecture="XLNetForPreTraining",
    instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs", "clm"),
    needs="text (shard field input_ids; the stored masks are undone)",
    description="XLNet: permutation LM, two-stream attention, the last 1/K of each factorisation order predicted",
))
_declare(ObjectiveInfo(
    name="txl_clm", architecture="TransformerXLLM",
    instance_formats=("single-segment", "full-sentences", "doc-sentences", "nsp-pairs", "clm"),
    needs="text in order (shard field input_ids; the stored masks are undone)",
    description="Transformer-XL: causal LM over consecutive segments of each instance with a carried memory",
))

# ModernBERT: masked LM alone, as RoBERTa's `mlm`, on its own architecture (30 % masking is the recipe's
# preprocess.masking.masked_lm_prob)
_declare(ObjectiveInfo(
    name="modernbert_mlm", architecture="ModernBertForMaskedLM", instance_formats=MASKED_TEXT_FORMATS,
    needs="masked tokens (shard fields mask_positions/mask_tokens)",
    description="ModernBERT: masked LM only (rotary, alternating global / sliding-window attention, GeGLU)",
))



def objective_names() -> list[str]:
    return sorted(_CATALOG)


def objective_info(name: str) -> ObjectiveInfo:
    if name not in _CATALOG:
        raise KeyError(f"unknown objective '{name}'; known: {', '.join(objective_names())}")
    return _CATALOG[name]
