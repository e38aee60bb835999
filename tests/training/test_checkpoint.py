"""Checkpoints: save_pretrained/load_pretrained round trip and validation, training-state files readable with
weights_only, atomic writes and keep_last."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertfactory.errors import ContractError
from training.checkpoint import (list_checkpoints, load_pretrained, load_training_state, save_checkpoint,
                                 save_pretrained)
from training.config import ModelConfig
from training.pretrain_config import PretrainConfig
from training.models.bert.model import BertConfig, BertForPreTraining
from training.pretrain import pretrain

CONFIG = BertConfig(vocab_size=45, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                    max_position_embeddings=32)


def _batch():
    ids = torch.tensor([[2, 10, 11, 3, 12, 13, 3], [2, 20, 21, 3, 22, 3, 0]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 0]])
    mask = (ids != 0).long()
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask,
                masked_positions=torch.tensor([[1, 4], [2, 0]]), masked_labels=torch.tensor([[10, 12], [21, -100]]),
                nsp_labels=torch.tensor([0, 1]))


def test_save_and_load_pretrained_round_trip(tiny_run, tmp_path):
    torch.manual_seed(0)
    model = BertForPreTraining(CONFIG)
    tokenizer = tiny_run / "tokenizer" / "tokenizer.json"
    target = tmp_path / "out" / "model"
    save_pretrained(model, CONFIG, tokenizer, target, training={"step": 7})
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert [p.name for p in target.parent.iterdir()] == ["model"]  # no staging directory left behind
    doc = json.loads((target / "config.json").read_text())
    assert doc["format"] == "bertfactory.checkpoint" and doc["version"] == 1
    assert doc["model"] == CONFIG.to_dict() and doc["training"] == {"step": 7}
    assert doc["tokenizer"]["vocab_size"] == 45 and doc["tokenizer"]["special_ids"]["mask"] == 4

    loaded, config, tok_path = load_pretrained(target)
    assert config == CONFIG and tok_path == target / "tokenizer.json" and not loaded.training
    model.eval()
    with torch.no_grad():
        a, b = model(**_batch()), loaded(**_batch())
    assert torch.equal(a["mlm_logits"], b["mlm_logits"]) and torch.equal(a["nsp_logits"], b["nsp_logits"])
    # saving again replaces the directory atomically
    save_pretrained(loaded, config, tok_path, target)
    assert "training" not in json.loads((target / "config.json").read_text())


def _saved(tiny_run, tmp_path):
    torch.manual_seed(0)
    target = tmp_path / "model"
    save_pretrained(BertForPreTraining(CONFIG), CONFIG, tiny_run / "tokenizer" / "tokenizer.json", target)
    return target


def test_load_pretrained_names_the_bad_field(tiny_run, tmp_path):
    target = _saved(tiny_run, tmp_path)
    doc = json.loads((target / "config.json").read_text())

    def write(d):
        (target / "config.json").write_text(json.dumps(d))

    write({**doc, "version": 99})
    with pytest.raises(ContractError, match="config.json: checkpoint version 99 is not supported"):
        load_pretrained(target)
    write({**doc, "model": {**doc["model"], "num_heads": "two"}})
    with pytest.raises(ContractError, match="config.json field 'model'.*'num_heads' must be int"):
        load_pretrained(target)
    del doc["model"]["hidden_size"]
    write(doc)
    with pytest.raises(ContractError, match="missing model config field.*hidden_size"):
        load_pretrained(target)
    write({"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 8})  # a transformers folder
    with pytest.raises(ContractError, match=r"is a Hugging Face model directory \(BertForMaskedLM\), not a "
                                            r"bertfactory model directory; convert it first with `bertfactory import-hf"):
        load_pretrained(target)  # was: "field 'format' is None" (export, evaluate, a distillation teacher)
    (target / "config.json").write_text("{not json")
    with pytest.raises(ContractError, match="config.json is not valid JSON"):
        load_pretrained(target)
    with pytest.raises(ContractError, match="does not exist"):
        load_pretrained(tmp_path / "nowhere")


def test_load_pretrained_refuses_other_tokenizer_and_mismatched_weights(tiny_run, tmp_path):
    target = _saved(tiny_run, tmp_path)
    original = (target / "tokenizer.json").read_bytes()
    (target / "tokenizer.json").write_bytes(original.replace(b'"w0"', b'"w00"'))
    with pytest.raises(ContractError, match="tokenizer.sha256"):
        load_pretrained(target)
    (target / "tokenizer.json").write_bytes(original)
    state = load_file(str(target / "model.safetensors"))
    state["bert.pooler.dense.weight"] = torch.zeros(3, 3)
    save_file(state, str(target / "model.safetensors"))
    with pytest.raises(ContractError, match="bert.pooler.dense.weight"):
        load_pretrained(target)
    del state["bert.pooler.dense.weight"]
    save_file(state, str(target / "model.safetensors"))
    with pytest.raises(ContractError, match="missing \\['bert.pooler.dense.weight'\\]"):
        load_pretrained(target)


def test_training_checkpoints_load_with_weights_only_and_keep_last(tiny_run):
    model_cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)
    cfg = PretrainConfig(batch_size=16, max_steps=8, warmup_steps=2, learning_rate=1e-3, log_every=2, save_every=2,
                         keep_last=2, seed=0)
    summary = pretrain(model_cfg, cfg, tiny_run)
    checkpoints = tiny_run / "pretrain" / "checkpoints"
    assert [s for s, _ in list_checkpoints(checkpoints)] == [4, 6]  # 2 is gone; 8 is the final model
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-4", "step-6"]  # no staging leftovers
    state = torch.load(checkpoints / "step-6" / "training_state.pt", weights_only=True)
    assert state["step"] == 6 and state["version"] == 1
    assert state["data"]["epoch"] == 6 // 16 and state["data"]["variant"] == 0
    assert set(state["rng"]) >= {"torch", "numpy", "python"}
    assert state["optimizer"]["state"] and state["scheduler"]["last_epoch"] == 6
    assert load_training_state(checkpoints / "step-6")["tokens_seen"] > 0
    model, config, _ = load_pretrained(checkpoints / "step-6")  # a training checkpoint is also a model directory
    assert config.hidden_size == 32
    final, _, _ = load_pretrained(summary["final_dir"])
    assert not final.training


def test_failed_save_leaves_no_partial_directory(tmp_path):
    torch.manual_seed(0)
    model = BertForPreTraining(CONFIG)
    out = tmp_path / "checkpoints"
    out.mkdir()
    with pytest.raises(ContractError, match="tokenizer .* does not exist"):
        save_checkpoint(out, 5, model, CONFIG, tmp_path / "missing-tokenizer.json", {"step": 5}, {"version": 1},
                        keep_last=3)
    assert list(out.iterdir()) == []
    with pytest.raises(ContractError, match="does not exist"):
        save_pretrained(model, CONFIG, tmp_path / "missing-tokenizer.json", tmp_path / "final")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]


def test_fields_added_after_a_checkpoint_compare_equal_at_their_default():
    from training.checkpoint import fingerprint_diff

    saved = {"model": {"hidden_size": 128}, "pretrain": {"seed": 1}}
    now = {"model": {"hidden_size": 128, "share_layers": "none"}, "pretrain": {"seed": 1, "compile": False}}
    defaults = {"model": {"share_layers": "none"}, "pretrain": {"compile": False}}
    assert fingerprint_diff(saved, now, defaults=defaults) == []
    changed = {"model": {"hidden_size": 128, "share_layers": "all"}, "pretrain": {"seed": 1, "compile": False}}
    assert fingerprint_diff(saved, changed, defaults=defaults) == ["model.share_layers (checkpoint '<absent>', now 'all')"]
    assert fingerprint_diff(saved, now) != []  # without defaults every new field is a difference


def test_saved_weights_are_as_readable_as_every_other_file(tiny_run, tmp_path):
    # safetensors creates its file 0600: on a shared run directory the other users could read everything but the
    # weights
    import os

    from training.hf import export_to_hf

    old = os.umask(0o022)
    try:
        model = BertForPreTraining(CONFIG)
        tok = tiny_run / "tokenizer" / "tokenizer.json"
        saved = [save_checkpoint(tmp_path / "ckpts", 1, model, CONFIG, tok, {}, {"version": 1}, keep_last=1),
                 save_pretrained(model, CONFIG, tok, tmp_path / "final")]
        saved.append(export_to_hf(saved[1], tmp_path / "hf"))
        for directory in saved:
            modes = {p.name: oct(p.stat().st_mode & 0o777) for p in directory.iterdir() if p.is_file()}
            assert set(modes.values()) == {"0o644"}, (directory, modes)
    finally:
        os.umask(old)


def test_a_damaged_training_checkpoint_is_refused_by_every_reader_of_its_weights(tiny_run, tmp_path):
    """A checkpoint's recorded sha256 guards its weights for export, evaluation, a distillation teacher
    (load_pretrained) and pretrain.init_from as it does for resume: a flipped bit in a tensor is one ContractError
    naming the file, never silently other weights."""
    from training.hf import export_to_hf

    model_cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_position_embeddings=32)
    cfg = PretrainConfig(batch_size=8, max_steps=3, warmup_steps=1, learning_rate=1e-3, log_every=1, save_every=2,
                         seed=0, num_threads=1, device="cpu")
    pretrain(model_cfg, cfg, tiny_run)
    step = tiny_run / "pretrain" / "checkpoints" / "step-2"
    load_pretrained(step)  # intact: loads
    weights = step / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x40  # inside the last tensor: the file still parses, with another value
    weights.write_bytes(bytes(data))
    damaged = f"{weights} is corrupted"
    with pytest.raises(ContractError, match=damaged):
        load_pretrained(step)
    with pytest.raises(ContractError, match=damaged):
        export_to_hf(step, tmp_path / "hf")
    other = tmp_path / "continued"
    other.mkdir()
    for part in ("tokenizer", "shards"):
        (other / part).symlink_to(tiny_run / part)
    with pytest.raises(ContractError, match=damaged):
        pretrain(model_cfg, cfg.model_copy(update={"init_from": str(step)}), other)
