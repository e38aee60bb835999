"""Hugging Face export of our ELECTRA checkpoints (no `transformers` import: config.json keys, names and shapes).

`export_electra_to_hf(model_dir, out)` writes
- `out/`: the discriminator as a `transformers` ElectraForPreTraining directory (config.json, model.safetensors,
  tokenizer.json, tokenizer_config.json), loadable with AutoModelForPreTraining (replaced-token logits) and
  AutoModel (the ElectraModel encoder, for fine-tuning);
- `out/generator/`: the generator as an ElectraForMaskedLM directory, loadable with AutoModelForMaskedLM.
`training.hf.export_to_hf` (and `bertfactory export CHECKPOINT --to hf OUT`) dispatches here for checkpoints of
architecture ElectraForPreTraining.

Names: our `discriminator.*` / `generator.*` encoders are HF's `electra.*` (same BERT layout inside, with
`embeddings_project` for factorised embeddings); `discriminator_head.{dense,dense_prediction}` ->
`discriminator_predictions.{dense,dense_prediction}`; `generator_head.{dense,LayerNorm}` ->
`generator_predictions.{dense,LayerNorm}`, `generator_head.bias` -> `generator_lm_head.bias` (the decoder weight
is tied to the word embeddings on both sides and not stored). The shared embeddings are written into both
directories (two HF models cannot share a tensor across directories). Left out: the discriminator's [CLS] pooler
(HF's ElectraModel has none; it is never trained in pretraining) and two-stage training's `steps_done` counter.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import torch

from bertfactory.errors import ContractError
from bertfactory.io import publish_dir

from .checkpoint import CONFIG_FILE, _staging_dir, load_pretrained, read_checkpoint_config
from .hf import _check_out, hf_tokenizer_config, write_hf_files
from .models.bert import BertConfig
from .models.electra import ElectraConfig, ElectraForPreTraining

logger = logging.getLogger(__name__)

GENERATOR_DIR = "generator"
_DISCRIMINATOR_HEAD = {"discriminator_head.dense.": "discriminator_predictions.dense.",
                       "discriminator_head.dense_prediction.": "discriminator_predictions.dense_prediction."}
_GENERATOR_HEAD = {"generator_head.dense.": "generator_predictions.dense.",
                   "generator_head.LayerNorm.": "generator_predictions.LayerNorm.",
                   "generator_head.bias": "generator_lm_head.bias"}


def hf_electra_config(config: BertConfig, architecture: str) -> dict[str, Any]:
    """One side (discriminator or generator BertConfig) -> a `transformers` ElectraConfig dict."""
    return {
        "model_type": "electra",
        "architectures": [architecture],
        "vocab_size": config.vocab_size,
        "embedding_size": config.embedding_width,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": "gelu",  # exact erf GELU, as our Intermediate and heads
        "hidden_dropout_prob": config.hidden_dropout,
        "attention_probs_dropout_prob": config.attention_dropout,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
        "is_decoder": False,
        "add_cross_attention": False,
        "dtype": "float32",
    }


def _check_exportable(config: ElectraConfig, source: str) -> None:
    problems = []
    if config.share_layers != "none":
        problems.append(f"model.share_layers={config.share_layers!r} (transformers ELECTRA shares no layers)")
    if config.num_languages:
        problems.append(f"model.num_languages={config.num_languages} (transformers ELECTRA has no language embeddings)")
    if problems:
        raise ContractError(f"{source}: cannot export as transformers ELECTRA: {'; '.join(problems)}")


def _renamed(state: dict[str, torch.Tensor], prefix: str, heads: dict[str, str]) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in state.items():
        if name.startswith(prefix):
            out["electra." + name[len(prefix):]] = tensor
            continue
        for ours, theirs in heads.items():
            if name.startswith(ours):
                out[theirs + name[len(ours):]] = tensor
    return {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in out.items()}


def electra_hf_states(model: ElectraForPreTraining) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(discriminator ElectraForPreTraining state, generator ElectraForMaskedLM state) under HF names; refuses a
    parameter it has no name for rather than dropping it silently."""
    state = model.state_dict()
    known = ("discriminator.", "generator.", "discriminator_head.", "generator_head.")
    skipped = [k for k in state if k.startswith("discriminator.pooler.") or k == "steps_done"]
    unknown = [k for k in state if not k.startswith(known) and k not in skipped]
    if unknown:
        raise ContractError(f"no Hugging Face name for parameter(s) {unknown}")
    discriminator = _renamed({k: v for k, v in state.items() if k not in skipped}, "discriminator.", _DISCRIMINATOR_HEAD)
    generator_state = {f"generator.{k}": v for k, v in model.generator.state_dict().items()}
    # the shared embeddings are not in the generator's own state dict: take them from the module it uses
    generator_state.update({f"generator.embeddings.{k}": v for k, v in model.generator.embeddings.state_dict().items()})
    generator_state.update({k: v for k, v in state.items() if k.startswith("generator_head.")})
    generator = _renamed(generator_state, "generator.", _GENERATOR_HEAD)
    return discriminator, generator


def export_electra_to_hf(model_dir: str | Path, out: str | Path, overwrite: bool = False,
                         layout: str | None = None) -> Path:
    """Write our ELECTRA model directory as `out` (discriminator, ElectraForPreTraining) + `out/generator`
    (ElectraForMaskedLM), staged and published atomically as one directory."""
    model_dir, out = Path(model_dir), Path(out)
    if layout not in (None, "auto", "electra"):
        raise ContractError(f"{model_dir / CONFIG_FILE}: an ELECTRA checkpoint exports only as layout 'electra' "
                            f"(got {layout!r})")
    _check_out(out, model_dir, overwrite)
    model, config, tokenizer_path = load_pretrained(model_dir)  # validates config.json, tokenizer sha256, weights
    if not isinstance(model, ElectraForPreTraining):
        raise ContractError(f"{model_dir / CONFIG_FILE}: architecture {type(model).__name__} is not ELECTRA")
    _check_exportable(config, str(model_dir / CONFIG_FILE))
    discriminator, generator = electra_hf_states(model)
    special_ids = read_checkpoint_config(model_dir)["tokenizer"].get("special_ids", {})
    tokenizer_config = hf_tokenizer_config(tokenizer_path, special_ids, config.max_position_embeddings)
    staging = _staging_dir(out)
    try:
        write_hf_files(staging, discriminator, hf_electra_config(config.discriminator_config(), "ElectraForPreTraining"),
                    tokenizer_path, tokenizer_config)
        write_hf_files(staging / GENERATOR_DIR, generator,
                    hf_electra_config(config.generator_config(), "ElectraForMaskedLM"), tokenizer_path, tokenizer_config)
        publish_dir(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("exported %s -> %s (transformers ElectraForPreTraining, %d tensors) + %s/%s (ElectraForMaskedLM, "
                "%d tensors)", model_dir, out, len(discriminator), out, GENERATOR_DIR, len(generator))
    return out
