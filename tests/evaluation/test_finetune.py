"""Fine-tuning on slices of the real movie reviews: it learns (training loss falls, dev accuracy beats the majority
class), keeps the best dev epoch, and is exactly reproducible under a seed on CPU."""

import numpy as np
import pytest
import torch

from evaluation.config import FinetuneConfig
from evaluation.encode import TextEncoder, pad_batch
from evaluation.finetune import encode_split, finetune
from evaluation.metrics import accuracy, majority_label
from evaluation.tasks.movie_sentiment import load_movie_sentiment
from training.models.bert import BertConfig, BertModel

CPU = torch.device("cpu")


def encoded_task(eval_run, task_slice, tmp_path, lines, max_seq_len=32):
    encoder = TextEncoder.from_file(eval_run / "pretrain" / "final" / "tokenizer.json")
    data = load_movie_sentiment(task_slice(tmp_path / "reviews.txt", lines))
    return data, [encode_split(encoder, getattr(data, s), max_seq_len) for s in ("train", "dev", "test")]


def model(hidden, seed=0, vocab=600):
    torch.manual_seed(seed)
    return BertModel(BertConfig(vocab_size=vocab, hidden_size=hidden, num_layers=2, num_heads=2,
                                intermediate_size=2 * hidden, max_position_embeddings=64))


def test_encoding_adds_cls_and_sep_and_truncates(eval_run):
    encoder = TextEncoder.from_file(eval_run / "pretrain" / "final" / "tokenizer.json")
    cls_id, sep_id = encoder.tokenizer.token_to_id("[CLS]"), encoder.tokenizer.token_to_id("[SEP]")
    long_text = "a gorgeously elaborate continuation of the trilogy " * 10
    short, long = encoder.encode(["a fine film", long_text], max_seq_len=12)
    assert short[0] == cls_id and short[-1] == sep_id and len(short) < 12
    assert list(short) == encoder.tokenizer.encode("a fine film").ids  # the tokenizer's own BERT post-processor agrees
    assert len(long) == 12 and long[0] == cls_id and long[-1] == sep_id
    assert list(long[1:-1]) == encoder.tokenizer.encode(long_text, add_special_tokens=False).ids[:10]
    batch = pad_batch([short, long], pad_id=0)
    assert batch["input_ids"].shape == (2, 12)
    assert batch["attention_mask"][0].tolist() == [1] * len(short) + [0] * (12 - len(short))
    assert int(batch["token_type_ids"].sum()) == 0


def test_finetuning_learns_sentiment(eval_run, task_slice, tmp_path):
    data, (train, dev, test) = encoded_task(eval_run, task_slice, tmp_path, 3000)
    cfg = FinetuneConfig(epochs=4, learning_rate=1e-3, batch_size=32, max_seq_len=32, seed=1)
    result = finetune(model(64), train, dev, test, cfg, CPU, pad_id=0, num_labels=2, name="test")
    losses = [e["train_loss"] for e in result.epochs]
    dev_curve = [e["dev_accuracy"] for e in result.epochs]
    assert losses[-1] < losses[0] - 0.05, losses
    majority = majority_label(train.labels)
    assert max(dev_curve) > accuracy(dev.labels, [majority] * len(dev)) + 0.05, dev_curve
    # the reported epoch is the (first) best on dev, and the reported dev score is its score
    assert result.best_epoch == int(np.argmax(dev_curve)) + 1
    assert result.dev_accuracy == max(dev_curve)
    assert 0.0 <= result.test_accuracy <= 1.0 and 0.0 <= result.test_f1 <= 1.0
    assert result.steps == 4 * -(-len(train) // 32) == len(result.step_losses)
    assert result.epochs[-1]["lr_end"] == 0.0  # linear decay ends at zero


def test_finetuning_is_reproducible_under_a_seed(eval_run, task_slice, tmp_path):
    _, (train, dev, test) = encoded_task(eval_run, task_slice, tmp_path, 600)
    cfg = FinetuneConfig(epochs=1, learning_rate=1e-3, batch_size=32, max_seq_len=32, seed=7)
    a = finetune(model(32), train, dev, test, cfg, CPU, pad_id=0, num_labels=2, name="a")
    b = finetune(model(32), train, dev, test, cfg, CPU, pad_id=0, num_labels=2, name="b")
    assert a.step_losses == b.step_losses and a.epochs == b.epochs and a.test_accuracy == b.test_accuracy
    c = finetune(model(32), train, dev, test, cfg.model_copy(update={"seed": 8}), CPU, pad_id=0, num_labels=2, name="c")
    assert c.step_losses != a.step_losses  # the seed matters (data order, classifier init, dropout)


def test_f1_is_left_out_for_tasks_with_more_than_two_labels(eval_run, task_slice, tmp_path):
    from evaluation.results import FinetuneScores

    _, (train, dev, test) = encoded_task(eval_run, task_slice, tmp_path, 300)
    train.labels = np.arange(len(train)) % 3  # three classes
    cfg = FinetuneConfig(epochs=1, learning_rate=1e-3, batch_size=32, max_seq_len=32, seed=1)
    result = finetune(model(32), train, dev, test, cfg, CPU, pad_id=0, num_labels=3, name="three")
    assert result.test_f1 is None
    FinetuneScores.model_validate(result.to_json())  # a NaN F1 used to fail the results contract


def test_empty_split_is_refused(eval_run, task_slice, tmp_path):
    _, (train, dev, test) = encoded_task(eval_run, task_slice, tmp_path, 300)
    empty = type(dev)([], np.zeros(0, dtype=np.int64))
    with pytest.raises(ValueError, match="non-empty train/dev/test"):
        finetune(model(32), train, empty, test, FinetuneConfig(), CPU, pad_id=0, num_labels=2, name="x")


def test_padding_and_truncation_saved_in_the_tokenizer_are_ignored(tmp_path, make_tokenizer):
    from tokenizers import Tokenizer

    path = make_tokenizer(tmp_path / "tok.json", 300, 300)
    tok = Tokenizer.from_file(str(path))
    tok.enable_padding(length=40, pad_id=0, pad_token="[PAD]")
    tok.enable_truncation(max_length=5)
    tok.save(str(path))
    (ids,) = TextEncoder.from_file(path).encode(["what a wonderful and moving film this is"], max_seq_len=30)
    assert 5 < len(ids) < 30 and 0 not in ids.tolist()
