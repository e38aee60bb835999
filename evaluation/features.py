"""Feature-based use of a frozen encoder (BERT paper, section 5.3 / Table 7: CoNLL-2003 NER without fine-tuning):
the encoder's hidden states are computed once, without gradients, and a small tagger is trained on top of a
combination of layers. `compare_options` trains one tagger per combination on the same task and returns the
side-by-side table.

Combinations (`OPTIONS`; "layers" are the embedding output h_0 and the transformer layers h_1..h_L; with fewer
than four layers the "last four" options use all there are, and the table says which were used):
- embeddings: h_0 (the paper's "first layer (embeddings)")
- last: h_L;  second_to_last: h_(L-1)
- sum_last_four: h_(L-3) + ... + h_L;  concat_last_four: [h_(L-3); ...; h_L]
- scalar_mix: ELMo's gamma * sum_j softmax(s)_j h_j over all layers (s and gamma trained with the tagger) — the
  "weighted sum of all layers" row of the paper's table.

The tagger: a 1-layer bidirectional LSTM (`lstm_hidden` units per direction; the paper used two 768-unit layers)
over each word's first sub-token vector, then a linear layer to the tags; Adam, cross-entropy over words, the
epoch with the best dev entity F1 scored on test. A word without a sub-token (cut by max_seq_len, or tokenised to
nothing) is tagged O, as in fine-tuning.

    table = compare_options(encoder, prepared_tagging_task, FeatureBasedConfig(enabled=True), device, pad_id)
    print(render_table(table))
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

from .config import FeatureBasedConfig
from .finetune import PreparedTask, Split
from .inputs import collate
from .scoring import score

if TYPE_CHECKING:
    from .run_pool import RunPool

logger = logging.getLogger(__name__)

OPTIONS = {
    "embeddings": "first layer (embeddings)",
    "last": "last hidden",
    "second_to_last": "second-to-last hidden",
    "sum_last_four": "sum of last four hidden",
    "concat_last_four": "concat of last four hidden",
    "scalar_mix": "weighted sum of all layers (ELMo scalar mix)",
}


class ScalarMix(nn.Module):
    """gamma * sum_j softmax(s)_j h_j (Peters et al. 2018); s starts at 0 (equal weights), gamma at 1."""

    def __init__(self, num_layers: int):
        super().__init__()
        self.scalars = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: torch.Tensor) -> torch.Tensor:
        """layers [L+1, ..., H] -> [..., H]"""
        weights = torch.softmax(self.scalars, 0).view(-1, *([1] * (layers.dim() - 1)))
        return self.gamma * (weights * layers).sum(0)


def layers_used(option: str, num_states: int) -> list[int]:
    """Indices into (h_0, ..., h_L) that `option` reads."""
    last = num_states - 1
    if option == "embeddings":
        return [0]
    if option == "last":
        return [last]
    if option == "second_to_last":
        return [max(0, last - 1)]
    if option in ("sum_last_four", "concat_last_four"):
        return list(range(max(0, last - 3), last + 1))
    if option == "scalar_mix":
        return list(range(num_states))
    raise ValueError(f"unknown feature option {option!r}; options: {', '.join(OPTIONS)}")


class FeatureTagger(nn.Module):
    def __init__(self, option: str, num_states: int, hidden_size: int, lstm_hidden: int, num_tags: int):
        super().__init__()
        self.option = option
        self.layers = layers_used(option, num_states)
        width = hidden_size * (len(self.layers) if option == "concat_last_four" else 1)
        self.mix = ScalarMix(num_states) if option == "scalar_mix" else None
        self.dropout = nn.Dropout(0.1)
        self.lstm = nn.LSTM(width, lstm_hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * lstm_hidden, num_tags)

    def combine(self, states: torch.Tensor) -> torch.Tensor:
        """states [L+1, W, H] of one sentence -> [W, D]"""
        picked = states[self.layers]
        if self.mix is not None:
            return self.mix(picked)
        if self.option == "sum_last_four":
            return picked.sum(0)
        if self.option == "concat_last_four":
            return torch.cat(list(picked), dim=-1)
        return picked[0]

    def forward(self, sentences: Sequence[torch.Tensor]) -> torch.Tensor:
        """per-sentence states -> logits [B, W_max, tags]"""
        inputs = [self.combine(s) for s in sentences]
        lengths = torch.tensor([len(x) for x in inputs])
        padded = self.dropout(pad_sequence(inputs, batch_first=True))
        packed = pack_padded_sequence(padded, lengths, batch_first=True, enforce_sorted=False)
        hidden, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=padded.shape[1])
        return self.out(self.dropout(hidden))


@torch.no_grad()
def word_states(encoder: nn.Module, split: Split, device: torch.device, pad_id: int, batch_size: int = 64
                ) -> list[torch.Tensor]:
    """Per sentence, the frozen encoder's (h_0, ..., h_L) at each word's first sub-token: [L+1, words, H]
    (zeros for a word without a sub-token)."""
    encoder.eval()
    features = split.features
    out: list[torch.Tensor] = []
    for start in range(0, len(features), batch_size):
        indices = list(range(start, min(len(features), start + batch_size)))
        batch = {k: v.to(device) for k, v in collate(features, indices, pad_id).items()}
        _, states = encoder(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                            output_hidden_states=True)
        stacked = torch.stack(states).float().cpu()  # [L+1, B, T, H]
        for i, row in enumerate(indices):
            starts = torch.from_numpy(features.word_starts[row])
            words = stacked[:, i, starts.clamp(min=0)]  # [L+1, W, H]
            words[:, starts < 0] = 0.0
            out.append(words)
    return out


def _predict(tagger: FeatureTagger, states: list[torch.Tensor], split: Split, outside: int) -> list[list[int]]:
    tagger.eval()
    predictions = []
    with torch.no_grad():
        for start in range(0, len(states), 128):
            chunk = states[start: start + 128]
            tags = tagger(chunk).argmax(-1)
            for i, s in enumerate(chunk):
                predictions.append(tags[i, : s.shape[1]].tolist())
    for sentence, starts in zip(predictions, split.features.word_starts):
        for w, s in enumerate(starts):
            if s < 0:
                sentence[w] = outside
    return predictions


def train_tagger(option: str, train: list[torch.Tensor], dev: list[torch.Tensor], test: list[torch.Tensor],
                 task: PreparedTask, cfg: FeatureBasedConfig, seed: int) -> dict:
    torch.manual_seed(seed)
    num_states, _, hidden = train[0].shape
    labels = task.spec.label_names
    outside = labels.index("O")
    tagger = FeatureTagger(option, num_states, hidden, cfg.lstm_hidden, len(labels))
    optimizer = torch.optim.Adam(tagger.parameters(), lr=cfg.learning_rate)
    gold_train = [torch.tensor(e.tags) for e in task.train.examples]
    best: tuple[float, int, dict, dict] | None = None
    for epoch in range(cfg.epochs):
        tagger.train()
        order = np.random.default_rng([seed, epoch]).permutation(len(train))
        for b in range(math.ceil(len(train) / cfg.batch_size)):
            rows = order[b * cfg.batch_size: (b + 1) * cfg.batch_size]
            logits = tagger([train[r] for r in rows])
            target = pad_sequence([gold_train[r] for r in rows], batch_first=True, padding_value=-100)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        dev_metrics = score(task.spec, task.dev.examples, _predict(tagger, dev, task.dev, outside))
        dev_f1 = dev_metrics["entity_f1"]
        if best is None or dev_f1 > best[0]:
            best = (dev_f1, epoch + 1, {k: v.detach().clone() for k, v in tagger.state_dict().items()}, dev_metrics)
    assert best is not None
    tagger.load_state_dict(best[2])
    test_metrics = score(task.spec, task.test.examples, _predict(tagger, test, task.test, outside))
    row = {"option": option, "description": OPTIONS[option], "layers": layers_used(option, num_states),
           "best_epoch": best[1], "dev_entity_f1": best[0], **test_metrics}
    if tagger.mix is not None:
        row["mix_weights"] = torch.softmax(tagger.mix.scalars.detach(), 0).tolist()
        row["mix_gamma"] = float(tagger.mix.gamma.detach())
    return row


def _train_tagger_job(job: tuple) -> dict:
    return train_tagger(*job)


def compare_options(encoder: nn.Module, task: PreparedTask, cfg: FeatureBasedConfig, device: torch.device,
                    pad_id: int, seed: int = 0, pool: "RunPool | None" = None) -> dict:
    """The side-by-side table on a tagging task: one tagger per option over the same frozen states (`pool`:
    the taggers in its worker processes at once, each exactly as it trains here at the same thread count)."""
    if task.spec.task_type != "tagging":
        raise ValueError(f"the feature-based comparison needs a tagging task; {task.name} is {task.spec.task_type}")
    encoder = encoder.to(device)
    states = {s: word_states(encoder, getattr(task, s), device, pad_id) for s in ("train", "dev", "test")}
    jobs = [(option, states["train"], states["dev"], states["test"], task, cfg, seed) for option in cfg.options]
    if pool is None:
        rows = [train_tagger(*job) for job in jobs]
    else:
        rows = pool.map(_train_tagger_job, jobs, f"the feature-based taggers on {task.name}")
    for row in rows:
        logger.info("feature-based %s on %s: test entity F1 %.4f", row["option"], task.name, row.get("entity_f1", 0.0))
    return {"task": task.name, "seed": seed, "layers_available": int(states["train"][0].shape[0]),
            "tagger": f"1-layer BiLSTM ({cfg.lstm_hidden} per direction) + linear over first sub-tokens; Adam lr "
                      f"{cfg.learning_rate:g}, {cfg.epochs} epochs, batch {cfg.batch_size}, best dev epoch",
            "rows": rows}


def render_table(table: dict) -> str:
    lines = [f"Feature-based ({table['task']}; frozen encoder, {table['tagger']}):", "",
             "| layers | used | dev entity F1 | test entity F1 | precision | recall |", "|---|---|---|---|---|---|"]
    for r in table["rows"]:
        lines.append(f"| {r['description']} | {', '.join(f'h{i}' for i in r['layers'])} | {r['dev_entity_f1']:.4f} | "
                     f"{r.get('entity_f1', 0.0):.4f} | {r.get('entity_precision', 0.0):.4f} | "
                     f"{r.get('entity_recall', 0.0):.4f} |")
    return "\n".join(lines)
