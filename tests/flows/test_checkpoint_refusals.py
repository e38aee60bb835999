"""A pickle that would run code is refused in the user's terms, never with torch's advice to retry with
`weights_only=False` (issue 23 item 6): a resumable checkpoint's training_state.pt and an imported Hugging Face
directory's pytorch_model.bin."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from bertfactory.errors import ContractError
from flows.cli import main
from training.checkpoint import STATE_FILE, load_training_state


class Payload:
    """Stands for any class a crafted pickle names: unpickling it would import and call code."""

    def __reduce__(self):
        return (print, ("this would have run",))


class Holder:
    pass


def _pickle_with_a_global(path):
    torch.save({"version": 1, "optimizer": Holder()}, path)


def test_a_training_state_naming_code_is_refused_without_unsafe_advice(tmp_path):
    _pickle_with_a_global(tmp_path / STATE_FILE)
    with pytest.raises(ContractError) as err:
        load_training_state(tmp_path)
    message = str(err.value)
    assert str(tmp_path / STATE_FILE) in message and "Holder" in message and "never" in message, message
    assert "weights_only" not in message and "add_safe_globals" not in message and "\n" not in message, message


def test_a_training_state_with_a_reduce_payload_is_refused(tmp_path):
    (tmp_path / STATE_FILE).write_bytes(pickle.dumps({"version": 1, "x": Payload()}, protocol=2))
    with pytest.raises(ContractError) as err:
        load_training_state(tmp_path)
    assert "weights_only" not in str(err.value) and "print" in str(err.value), err.value


def test_a_damaged_training_state_says_damaged(tmp_path):
    torch.save({"version": 1}, tmp_path / STATE_FILE)
    data = (tmp_path / STATE_FILE).read_bytes()
    (tmp_path / STATE_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(ContractError, match="damaged or not a PyTorch file") as err:
        load_training_state(tmp_path)
    assert "weights_only" not in str(err.value)


def test_import_hf_refuses_a_pytorch_bin_naming_code(tmp_path, capsys):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({
        "model_type": "bert", "architectures": ["BertForMaskedLM"], "vocab_size": 30, "hidden_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16,
        "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12}))
    (hf / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] +
                                            [f"w{i}" for i in range(25)]) + "\n")
    from tokenizers import BertWordPieceTokenizer

    BertWordPieceTokenizer(str(hf / "vocab.txt")).save(str(hf / "tokenizer.json"))
    _pickle_with_a_global(hf / "pytorch_model.bin")
    assert main(["import-hf", str(hf), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert "pytorch_model.bin" in err and "Holder" in err and "weights_only" not in err, err
    assert not (tmp_path / "out").exists()
