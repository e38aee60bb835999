"""The distillation losses of DistilBERT, BERT-PKD and TinyBERT, each a small function of tensors.

| function | method | formula |
|---|---|---|
| `soft_kl` | DistilBERT L_ce, BERT-PKD L_DS | T^2 * KL(softmax(t/T) || softmax(s/T)), mean over rows |
| `soft_cross_entropy` | TinyBERT prediction layer | -sum softmax(t/T) * log_softmax(s/T), mean over rows |
| `hidden_cosine` | DistilBERT L_cos | mean over real tokens of 1 - cos(s, t) |
| `patient_loss` | BERT-PKD L_PT | sum over mapped layers of ||s/||s|| - t/||t|| ||^2 on [CLS], mean over the batch |
| `pkd_loss` | BERT-PKD | alpha * soft_kl + (1 - alpha) * CE(labels) + beta * patient_loss |
| `hidden_mse` | TinyBERT L_hidn / L_embd | MSE(s W, t) over the real tokens (W: learnable projection, None = identity) |
| `attention_mse` | TinyBERT L_attn | MSE of the PRE-softmax scores, mean over heads and the attended query/key pairs |

Attention maps are distilled **pre-softmax** (TinyBERT's reference code distills `attention_scores` before the
softmax); positions whose query or key is padding are left out (the reference zeroes scores below -100, which is the
same thing for its additive -10000 mask). Our SDPA attention hands the scores out only on request
(`SelfAttention.score_sink`, see outputs.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def soft_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * KL(p_t || p_s) with p = softmax(logits / T), averaged over the rows ([N, C] logits)."""
    t = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    return (t.exp() * (t - s)).sum(-1).mean() * temperature ** 2


def soft_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """-sum_c softmax(t/T)_c * log_softmax(s/T)_c, averaged over the rows (TinyBERT's prediction-layer loss)."""
    t = F.softmax(teacher_logits.float() / temperature, dim=-1)
    s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    return -(t * s).sum(-1).mean()


def _real_tokens(attention_mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if attention_mask is None:
        return torch.ones(like.shape[:2], dtype=torch.bool, device=like.device)
    return attention_mask.to(torch.bool)


def hidden_cosine(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor,
                  attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """mean over the real tokens of 1 - cos(s, t); states [B, T, H] of the same width."""
    real = _real_tokens(attention_mask, student_hidden)
    cos = F.cosine_similarity(student_hidden[real].float(), teacher_hidden[real].float(), dim=-1)
    return (1.0 - cos).mean()


def patient_loss(student_cls: list[torch.Tensor], teacher_cls: list[torch.Tensor]) -> torch.Tensor:
    """BERT-PKD's patient loss: sum over the mapped layer pairs of the squared distance between the L2-normalised
    [CLS] states ([B, H] each), averaged over the batch."""
    if len(student_cls) != len(teacher_cls) or not student_cls:
        raise ValueError(f"patient_loss needs as many student as teacher layers (>0), got {len(student_cls)} and "
                         f"{len(teacher_cls)}")
    total = 0.0
    for s, t in zip(student_cls, teacher_cls):
        diff = F.normalize(s.float(), dim=-1) - F.normalize(t.float(), dim=-1)
        total = total + diff.pow(2).sum(-1).mean()
    return total


def pkd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor, alpha: float,
             temperature: float, beta: float, student_cls: list[torch.Tensor] | None = None,
             teacher_cls: list[torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """alpha * T^2 KL + (1 - alpha) * CE + beta * patient -> {'loss', 'ds_loss', 'ce_loss', 'pt_loss'}."""
    ds = soft_kl(student_logits, teacher_logits, temperature)
    ce = F.cross_entropy(student_logits.float(), labels)
    pt = patient_loss(student_cls, teacher_cls) if student_cls else ds.new_zeros(())
    return {"loss": alpha * ds + (1 - alpha) * ce + beta * pt, "ds_loss": ds, "ce_loss": ce, "pt_loss": pt}


def hidden_mse(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor,
               projection: torch.nn.Module | None = None, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """MSE(s W, t) over the real tokens: mean of the squared error over the real tokens and the teacher's width."""
    s = projection(student_hidden) if projection is not None else student_hidden
    if s.shape[-1] != teacher_hidden.shape[-1]:
        raise ValueError(f"hidden_mse: student width {s.shape[-1]} != teacher width {teacher_hidden.shape[-1]}; "
                         "give a projection (TinyBERT's W_h / W_e)")
    real = _real_tokens(attention_mask, student_hidden)
    return F.mse_loss(s[real].float(), teacher_hidden[real].float())


def attention_mse(student_scores: torch.Tensor, teacher_scores: torch.Tensor,
                  attention_mask: torch.Tensor | None = None, pairs: torch.Tensor | None = None) -> torch.Tensor:
    """MSE of pre-softmax attention scores [B, heads, T, T], over every head and every (query, key) pair whose
    query and key are both real tokens; `pairs` ([B, 1, T, T] bool) narrows that to the pairs given (those both
    layers attend: a sliding-window layer's scores outside its window never reach its softmax)."""
    if student_scores.shape != teacher_scores.shape:
        raise ValueError(f"attention_mse: student scores {tuple(student_scores.shape)} != teacher scores "
                         f"{tuple(teacher_scores.shape)} (the student needs the teacher's number of heads)")
    real = _real_tokens(attention_mask, student_scores)
    both = (real[:, :, None] & real[:, None, :])[:, None]
    pairs = (both if pairs is None else both & pairs).expand_as(student_scores)
    return F.mse_loss(student_scores[pairs].float(), teacher_scores[pairs].float())
