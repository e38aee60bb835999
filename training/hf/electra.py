"""Hugging Face export and import of ELECTRA (no `transformers` import: config.json keys, names and shapes).
Import (`import_electra_from_hf`, via `training.hf.import_from_hf` for model_type electra) is the inverse of the
export below: the pair, a discriminator alone (generator initialised) or a generator alone (a masked LM).

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
from pydantic import ValidationError

from bertfactory.errors import ContractError
from bertfactory.io import publish_dir

from ..checkpoint import CONFIG_FILE, _staging_dir
from .files import (HF_BERT_FIELDS, finish_import, hf_tokenizer_config, hf_tokenizer_file, load_for_export,
                       load_mapped, read_hf_weights, seeded, with_sentence_head, write_hf_files)
from .layouts import encoder_config_problems
from ..models.bert.model import BertConfig
from ..models.core.config_schema import config_problems
from ..models.electra.model import ElectraConfig, ElectraForPreTraining

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
    model, config, tokenizer_path, special_ids = load_for_export(model_dir, out, overwrite, ElectraForPreTraining,
                                                                 "ELECTRA")
    _check_exportable(config, str(model_dir / CONFIG_FILE))
    discriminator, generator = electra_hf_states(model)
    tokenizer_config = hf_tokenizer_config(tokenizer_path, special_ids, config.max_position_embeddings)
    staging = _staging_dir(out)
    try:
        write_hf_files(staging, discriminator,
                       hf_electra_config(config.discriminator_config(), "ElectraForPreTraining"), tokenizer_path,
                       tokenizer_config)
        write_hf_files(staging / GENERATOR_DIR, generator,
                       hf_electra_config(config.generator_config(), "ElectraForMaskedLM"), tokenizer_path,
                       tokenizer_config)
        publish_dir(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("exported %s -> %s (transformers ElectraForPreTraining, %d tensors) + %s/%s (ElectraForMaskedLM, "
                "%d tensors)", model_dir, out, len(discriminator), out, GENERATOR_DIR, len(generator))
    return out


# ----------------------------------------------------------------------------------------------------- import

DISCRIMINATOR_ARCHITECTURES = ("ElectraForPreTraining", "ElectraModel")
GENERATOR_ARCHITECTURES = ("ElectraForMaskedLM",)
# parts of our ElectraForPreTraining an HF directory may lack (initialised on import, seeded)
_GENERATOR_IMPORT = {**_GENERATOR_HEAD, "generator_head.weight": "generator_lm_head.weight"}  # tied, checked
_OPTIONAL = {"discriminator.pooler.": "discriminator pooler", "discriminator_head.": "replaced-token detection head",
             "generator.": "generator", "generator_head.": "generator MLM head"}


def electra_side_values(hf: Any, source: str, architectures: tuple[str, ...]) -> dict[str, Any]:
    """One side's transformers ElectraConfig dict -> our BertConfig fields; refuses what our encoder does not
    compute, naming the key."""

    if not isinstance(hf, dict):
        raise ContractError(f"{source}: expected a JSON object, got {type(hf).__name__}")
    problems = []
    if hf.get("model_type") != "electra":
        problems.append(f"model_type is {hf.get('model_type')!r}, expected 'electra'")
    problems += encoder_config_problems(hf, architectures, hint=f" here (expected {', '.join(architectures)})")
    if problems:
        raise ContractError(f"{source}: cannot import as ELECTRA: {'; '.join(problems)}")
    values = {ours: hf[theirs] for theirs, ours in HF_BERT_FIELDS.items() if theirs in hf and hf[theirs] is not None}
    embedding = hf.get("embedding_size", hf["hidden_size"])
    values["embedding_size"] = None if embedding == hf["hidden_size"] else embedding
    return values


def _prefixed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A bare ElectraModel's names under ElectraFor*'s `electra.` prefix; HF's non-persistent buffers dropped."""
    out = {}
    for name, tensor in state.items():
        if name.startswith(("embeddings.", "embeddings_project.", "encoder.")):
            name = "electra." + name
        if not name.endswith(("embeddings.position_ids", "embeddings.token_type_ids")):
            out[name] = tensor
    return out


def _side_state(state: dict[str, torch.Tensor], prefix: str, heads: dict[str, str], source: Path
                ) -> dict[str, torch.Tensor]:
    """HF names of one side -> ours (`prefix` for the encoder, `heads`: our head prefix -> HF's); refuses others."""
    out, unknown = {}, []
    for name, tensor in state.items():
        if name.startswith("electra."):
            out[prefix + name[len("electra."):]] = tensor
            continue
        for ours, theirs in heads.items():
            if name.startswith(theirs):
                out[ours + name[len(theirs):]] = tensor
                break
        else:
            unknown.append(name)
    if unknown:
        raise ContractError(f"{source}: tensor(s) {', '.join(sorted(unknown)[:8])} belong to no supported ELECTRA "
                            "architecture")
    return out


def import_electra_from_hf(hf_dir: Path, out: Path, hf_config: dict[str, Any], seed: int = 0):
    """A transformers ELECTRA directory -> one of our model directories:
    - ElectraForPreTraining / ElectraModel (the discriminator), with `generator/` holding its ElectraForMaskedLM
      (the pair our export writes) -> our ElectraForPreTraining, generator_size = generator hidden / discriminator
      hidden; the generator's embeddings must equal the discriminator's (ours shares one block);
    - the discriminator alone -> our ElectraForPreTraining with a generator of the default generator_size,
      initialised (seeded) and reported;
    - an ElectraForMaskedLM alone (a generator) -> our BertForPreTraining (a masked LM with factorised
      embeddings; no sentence head)."""
    from ..models.bert.model import BertForPreTraining

    config_path = hf_dir / CONFIG_FILE
    tokenizer_path = hf_tokenizer_file(hf_dir)
    archs = hf_config.get("architectures") or []
    if archs == ["ElectraForMaskedLM"]:
        values = with_sentence_head(electra_side_values(hf_config, str(config_path), GENERATOR_ARCHITECTURES), False)
        config = BertConfig.from_dict(values, source=str(config_path))
        heads = {"mlm_head" + k[len("generator_head"):]: v for k, v in _GENERATOR_IMPORT.items()}
        state = _side_state(_prefixed(read_hf_weights(hf_dir)), "bert.", heads, hf_dir)
        _check_tied(state, hf_dir, "bert.")
        model = seeded(lambda: BertForPreTraining(config), seed)
        initialised, dropped = load_mapped(model, state, hf_dir, config_path,
                                           {"bert.pooler.": "pooler", "nsp_head.": "NSP head"})
        return finish_import(model, config, tokenizer_path, out, hf_dir, "ElectraForMaskedLM", initialised, seed,
                             tuple(dropped))
    values = electra_side_values(hf_config, str(config_path), DISCRIMINATOR_ARCHITECTURES)
    state = _side_state(_prefixed(read_hf_weights(hf_dir)), "discriminator.", _DISCRIMINATOR_HEAD, hf_dir)
    generator_dir = hf_dir / GENERATOR_DIR
    electra: dict[str, Any] = {}
    architecture = archs[0] if archs else "ELECTRA (no 'architectures' in config.json)"
    if (generator_dir / CONFIG_FILE).is_file():
        from bertfactory.io import read_json_file

        generator_path = generator_dir / CONFIG_FILE
        generator_values = electra_side_values(read_json_file(generator_path, f"no {CONFIG_FILE} in {generator_dir}"),
                                               str(generator_path), GENERATOR_ARCHITECTURES)
        electra["generator_size"] = generator_values["hidden_size"] / values["hidden_size"]
        generator = _side_state(_prefixed(read_hf_weights(generator_dir)), "generator.", _GENERATOR_IMPORT,
                                generator_dir)
        _check_tied(generator, generator_dir, "generator.")
        for name in [k for k in generator if k.startswith("generator.embeddings.")]:
            shared = "discriminator." + name[len("generator."):]
            if shared not in state or not torch.equal(generator[name], state[shared]):
                raise ContractError(f"{generator_dir}: electra.{name[len('generator.'):]} differs from the "
                                    f"discriminator's ({hf_dir}); our ELECTRA shares one embedding block")
            del generator[name]
        state.update(generator)
        architecture += f" + {generator_dir.name}/ ElectraForMaskedLM"
    try:
        config = ElectraConfig(**BertConfig.from_dict(values, source=str(config_path)).to_dict(), **electra)
    except ValidationError as err:
        raise ContractError(f"{config_path}: {config_problems(ElectraConfig, err)}") from None
    if electra:
        _check_generator(config, generator_values, generator_path)
    model = seeded(lambda: ElectraForPreTraining(config), seed)
    initialised, _ = load_mapped(model, state, hf_dir, config_path, _OPTIONAL)
    return finish_import(model, config, tokenizer_path, out, hf_dir, architecture, initialised, seed)


def _check_tied(state: dict[str, torch.Tensor], source: Path, prefix: str) -> None:
    """generator_lm_head.weight (mapped to `generator_head.weight`) must be the word embeddings; then dropped."""
    for name in ("generator_head.weight", "mlm_head.weight"):
        tied = state.pop(name, None)
        words = state.get(prefix + "embeddings.word_embeddings.weight")
        if tied is not None and (words is None or not torch.equal(tied, words)):
            raise ContractError(f"{source}: generator_lm_head.weight differs from the word embeddings (an untied "
                                "decoder is not supported)")


def _check_generator(config: ElectraConfig, hf: dict[str, Any], source: Path) -> None:
    """Our generator_config() at the derived generator_size must have the HF generator's shape (`hf`: its
    config under our field names)."""
    ours = config.generator_config()
    wrong = [f"{key} {hf.get(key)!r} (ours {getattr(ours, key)!r})" for key in
             ("hidden_size", "num_heads", "intermediate_size", "num_layers", "vocab_size", "max_position_embeddings",
              "type_vocab_size", "layer_norm_eps", "pad_token_id")
             if hf.get(key, getattr(ours, key)) != getattr(ours, key)]
    width = hf.get("embedding_size") or hf["hidden_size"]
    if width != ours.embedding_width:
        wrong.append(f"embedding width {width} (the discriminator's is {ours.embedding_width}; they share it)")
    if wrong:
        raise ContractError(f"{source}: the generator is not our generator of the discriminator at generator_size "
                            f"{config.generator_size:.4g} (hidden size ratio): {'; '.join(wrong)}")
