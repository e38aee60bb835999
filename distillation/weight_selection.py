"""Weight selection: start a narrow student from a consistent subset of its teacher's weights instead of a random init.

Xu et al., "Initializing Models with Larger Ones" (ICLR 2024): a smaller model of the same family is initialised by
selecting, from each of the larger model's weight tensors, the elements at fixed index sets, the same set wherever
one dimension of the network appears (the residual width in every embedding, LayerNorm and Linear; each head's
dimensions in Q, K, V and the attention output; the FFN's inner dimensions in its two Linears). Selected this way the
student is a sub-network of the teacher: where nothing is dropped it computes exactly the teacher's function, and
where dimensions are dropped its states stay correlated with the teacher's (MiniLM 6 x 384 -> 4 x 312: mean cosine
0.73 / 0.70 / 0.64 / 0.48 in layers 1-4 against the mapped teacher layers on the kept dimensions), so it mixes context
like the teacher from step 0. Index sets: the residual width's first k dimensions, each head's first d_s dimensions,
the FFN's evenly spaced ones (why: `_index_sets`). TinyBERT's
student (distillation/stage.py `_tinybert`) otherwise starts random and, with a few hundred CPU steps, never learns
to mix context (its [CLS] state stays nearly constant across inputs).

    student = narrow_student(teacher.config, hidden_size=312, num_layers=4, intermediate_size=1200)
    select_from_teacher(student, teacher, tinybert_map(6, 4, "uniform"))   # in place; layer m <- teacher layer g(m)

`tinybert.init: teacher` (distillation/config.py) does this for the TinyBERT student. Student layer m (1..M) takes
teacher layer g(m) of the layer map ({student layer: teacher layer}, 1-based, 0 = embeddings); the embeddings, pooler
and heads take the teacher's. Only the BERT layout (`BertForPreTraining` teacher and student: separate query / key /
value Linears, post-LN, no factorised embeddings, no shared layers) is supported; anything else is a ConfigError.
"""

from __future__ import annotations

import torch

from bertfactory.errors import ConfigError
from training.models.bert.model import BertConfig, BertForPreTraining

_ENCODER = "bert.encoder.layer."

# per parameter-name suffix, one index kind per axis: "H" residual width, "A" attention inner (heads x head dims),
# "F" the FFN's inner width, "=" copied whole (vocabulary, positions, segments, languages, NSP classes)
_LAYER_AXES = {
    "attention.self.query.weight": ("A", "H"), "attention.self.query.bias": ("A",),
    "attention.self.key.weight": ("A", "H"), "attention.self.key.bias": ("A",),
    "attention.self.value.weight": ("A", "H"), "attention.self.value.bias": ("A",),
    "attention.output.dense.weight": ("H", "A"), "attention.output.dense.bias": ("H",),
    "attention.output.LayerNorm.weight": ("H",), "attention.output.LayerNorm.bias": ("H",),
    "intermediate.dense.weight": ("F", "H"), "intermediate.dense.bias": ("F",),
    "output.dense.weight": ("H", "F"), "output.dense.bias": ("H",),
    "output.LayerNorm.weight": ("H",), "output.LayerNorm.bias": ("H",),
}
_OTHER_AXES = {
    "bert.embeddings.word_embeddings.weight": ("=", "H"),
    "bert.embeddings.position_embeddings.weight": ("=", "H"),
    "bert.embeddings.token_type_embeddings.weight": ("=", "H"),
    "bert.embeddings.language_embeddings.weight": ("=", "H"),
    "bert.embeddings.LayerNorm.weight": ("H",), "bert.embeddings.LayerNorm.bias": ("H",),
    "bert.pooler.dense.weight": ("H", "H"), "bert.pooler.dense.bias": ("H",),
    "mlm_head.dense.weight": ("H", "H"), "mlm_head.dense.bias": ("H",),
    "mlm_head.LayerNorm.weight": ("H",), "mlm_head.LayerNorm.bias": ("H",),
    "mlm_head.bias": ("=",),
    "nsp_head.classifier.weight": ("=", "H"), "nsp_head.classifier.bias": ("=",),
}


def first(n: int, k: int) -> torch.Tensor:
    """The first k of the indices 0..n-1."""
    if not 1 <= k <= n:
        raise ConfigError(f"weight selection cannot take {k} of {n} dimensions")
    return torch.arange(k)


def spread(n: int, k: int) -> torch.Tensor:
    """k of the indices 0..n-1, evenly spaced: floor(i * n / k) for i = 0..k-1 (integer arithmetic, so strictly
    increasing and exact whenever k <= n; all of them when k == n)."""
    if not 1 <= k <= n:
        raise ConfigError(f"weight selection cannot take {k} of {n} dimensions")
    return torch.tensor([i * n // k for i in range(k)], dtype=torch.long)


def _check_layout(student: torch.nn.Module, teacher: torch.nn.Module) -> None:
    for role, model in (("teacher", teacher), ("student", student)):
        # ModernBertForMaskedLM subclasses BertForPreTraining: compare the exact class, not isinstance
        if type(model) is not BertForPreTraining or type(model.config) is not BertConfig:
            raise ConfigError(f"tinybert.init: teacher supports BERT teachers and students (BertForPreTraining), "
                              f"not a {type(model).__name__} {role}; use tinybert.init: random")
        if model.config.embedding_size is not None or model.config.share_layers != "none":
            raise ConfigError(f"tinybert.init: teacher does not support a {role} with factorised embeddings "
                              f"(embedding_size) or shared layers (share_layers: {model.config.share_layers}); use "
                              "tinybert.init: random")
    s, t = student.config, teacher.config
    if s.num_heads != t.num_heads:
        raise ConfigError(f"tinybert.init: teacher selects each student head from a teacher head, so the student "
                          f"needs the teacher's {t.num_heads} heads (tinybert.num_heads: {s.num_heads})")
    for what, ours, theirs in (("hidden_size", s.hidden_size, t.hidden_size),
                               ("intermediate_size", s.intermediate_size, t.intermediate_size)):
        if ours > theirs:
            raise ConfigError(f"tinybert.init: teacher needs a student no wider than the teacher: {what} {ours} > "
                              f"the teacher's {theirs}")


def _index_sets(student: BertForPreTraining, teacher: BertForPreTraining) -> dict[str, torch.Tensor]:
    s, t = student.config, teacher.config
    # Residual width H: the first k. Its dimensions have no order, so any fixed set used everywhere is a consistent
    # selection (evenly spaced, consecutive, a fixed random draw); what does matter is which of the teacher's few
    # large-magnitude residual dimensions a set keeps. On MiniLM (384 -> 312, 4 of 6 layers, uniform g(m), 64 movie
    # sentences) the evenly spaced set drops dimension 63, the largest in its embeddings and among the top three in
    # layers 1-3, and the student's states had mean cosine 0.60 to the teacher's mapped ones over layers 1-4; the
    # first 312 keep it: 0.64 (random consistent sets: 0.63-0.66). First k is also nested: a narrower student's set
    # is a subset of a wider one's.
    # Attention: each head's first d_s of its d_t dimensions, the same for Q, K, V and the output projection's input
    # (evenly spaced measured the same there). FFN: evenly spaced over the inner width (the same as first k, measured).
    head_t, head_s = t.hidden_size // t.num_heads, s.hidden_size // s.num_heads
    per_head = first(head_t, head_s)
    attention = torch.cat([h * head_t + per_head for h in range(t.num_heads)])  # head h's dims, in head order
    return {"H": first(t.hidden_size, s.hidden_size), "A": attention,
            "F": spread(t.intermediate_size, s.intermediate_size)}


def _source(name: str, layer_map: dict[int, int]) -> tuple[str, tuple[str, ...]]:
    """The teacher parameter a student parameter is selected from, and its axes' index kinds."""
    if name.startswith(_ENCODER):
        index, tail = name[len(_ENCODER):].split(".", 1)
        axes = _LAYER_AXES.get(tail)
        source = f"{_ENCODER}{layer_map[int(index) + 1] - 1}.{tail}"
    else:
        axes, source = _OTHER_AXES.get(name), name
    if axes is None:
        raise ConfigError(f"weight selection does not know the student parameter {name} (a layout it does not "
                          "support); use tinybert.init: random")
    return source, axes


@torch.no_grad()
def select_from_teacher(student: BertForPreTraining, teacher: BertForPreTraining, layer_map: dict[int, int]) -> None:
    """Overwrite every parameter of `student` (in place) with the teacher's weight at consistent index sets: student
    layer m from teacher layer layer_map[m] (1-based; every student layer needs one), embeddings, pooler and heads
    from the teacher's. Deterministic (no randomness); a ConfigError for an unsupported layout, a different head
    count, a wider student or a student layer without a teacher layer."""
    _check_layout(student, teacher)
    n = student.config.num_layers
    missing = [m for m in range(1, n + 1) if not 1 <= layer_map.get(m, 0) <= teacher.config.num_layers]
    if missing:
        raise ConfigError(f"tinybert.init: teacher needs a teacher layer (1..{teacher.config.num_layers}) for every "
                          f"student layer; the layer map {dict(layer_map)} has none for student layer(s) {missing}")
    index = _index_sets(student, teacher)
    t_state = teacher.state_dict()
    targets = student.state_dict(keep_vars=True)
    selected = {}  # every value first, so that a refusal leaves the student as it was
    for name, target in targets.items():
        source, axes = _source(name, layer_map)
        if source not in t_state or t_state[source].dim() != len(axes):
            raise ConfigError(f"weight selection: the teacher has no parameter {source} shaped like the student's "
                              f"{name}; use tinybert.init: random")
        value = t_state[source]
        for axis, kind in enumerate(axes):
            if kind != "=":
                value = value.index_select(axis, index[kind].to(value.device))
        if value.shape != target.shape:
            raise ConfigError(f"weight selection: the student's {name} {tuple(target.shape)} does not fit the "
                              f"teacher's {source} {tuple(t_state[source].shape)} (the copied axes must match: "
                              "vocabulary, positions, segments)")
        selected[name] = value
    for name, value in selected.items():
        targets[name].copy_(value)
    # every parameter and buffer, enumerated apart from the state dict walked above: a name the walk missed fails here
    untouched = {name for name, _ in (*student.named_parameters(), *student.named_buffers())} - set(selected)
    assert not untouched, f"weight selection left student parameters untouched: {sorted(untouched)}"
