"""Which teacher layer each student layer learns from (layers counted from 1; 0 = the embeddings).

- `every_other(n)`: DistilBERT's initialisation — student layer i (1-based) copies teacher layer 2i - 1, i.e.
  teacher layers 1, 3, 5, ... (HF's extraction script for distilbert-base picks 0,2,4,7,9,11 0-based; we keep the
  plain every-other rule so any even depth works).
- `pkd_map(n_teacher, n_student, "skip"|"last")`: BERT-PKD's patient layers for the student's layers 1..M-1 (the
  last student layer is distilled through the logits): Skip = every k-th teacher layer (k = N/M): {k, 2k, ...};
  Last = the M-1 teacher layers just below the top: {N-M+1, ..., N-1}.
- `tinybert_map(n_teacher, n_student, "uniform"|"top"|"bottom")`: TinyBERT's g(m) for m = 0..M with g(0) = 0
  (embeddings): uniform g(m) = m*N/M (rounded half up when M does not divide N), top g(m) = N-M+m, bottom g(m) = m. An explicit list is accepted too
  (`check_map`).

Every map is validated: a teacher or student layer out of range is a ConfigError.

Attention kinds (ModernBERT): `attention_kinds(config)` says per layer whether it attends globally or in a sliding
window; BERT's layers are all global. A ModernBERT student made of copied teacher layers keeps each copied layer's
kind (and so its rotary base and window): `global_every_for(kinds)` finds the student's global_attn_every_n_layers
that reproduces the copied kinds, or refuses. Maps between layers of different kinds are allowed where only states
or attention scores are compared (TinyBERT, PKD): the scores are compared on the (query, key) pairs both layers
attend (distillation/outputs.py `attended_pairs`).
"""

from __future__ import annotations

from bertfactory.errors import ConfigError

PKD_STRATEGIES = ("skip", "last")
TINYBERT_STRATEGIES = ("uniform", "top", "bottom")


def check_map(mapping: dict[int, int], n_teacher: int, n_student: int, what: str = "layer map") -> dict[int, int]:
    """Refuse student layers outside 0..n_student and teacher layers outside 0..n_teacher (0 = embeddings)."""
    bad = [f"student {s} -> teacher {t}" for s, t in mapping.items()
           if not 0 <= s <= n_student or not 0 <= t <= n_teacher]
    if bad:
        raise ConfigError(f"{what}: {', '.join(bad)} out of range (student layers 0..{n_student}, teacher layers "
                          f"0..{n_teacher}; 0 = embeddings)")
    return dict(mapping)


def every_other(n_teacher: int) -> list[int]:
    """Teacher layers (1-based) whose weights initialise the student's layers 1..ceil(N/2)."""
    if n_teacher < 2:
        raise ConfigError(f"every-other-layer students need a teacher of >= 2 layers (got {n_teacher})")
    return list(range(1, n_teacher + 1, 2))


def pkd_map(n_teacher: int, n_student: int, strategy: str) -> dict[int, int]:
    """Student layer j (1..M-1) -> teacher layer, PKD-Skip or PKD-Last."""
    if strategy not in PKD_STRATEGIES:
        raise ConfigError(f"PKD strategy must be one of {', '.join(PKD_STRATEGIES)} (got {strategy!r})")
    if not 1 <= n_student <= n_teacher:
        raise ConfigError(f"PKD needs 1 <= student layers <= teacher layers (got {n_student} and {n_teacher})")
    if strategy == "skip":
        if n_teacher % n_student:
            raise ConfigError(f"PKD-Skip needs teacher layers {n_teacher} divisible by student layers {n_student}")
        k = n_teacher // n_student
        mapping = {j: j * k for j in range(1, n_student)}
    else:
        mapping = {j: n_teacher - n_student + j for j in range(1, n_student)}
    return check_map(mapping, n_teacher, n_student, f"PKD-{strategy}")


def tinybert_map(n_teacher: int, n_student: int, strategy: str) -> dict[int, int]:
    """TinyBERT's g(m), m = 0..M (0 = embeddings)."""
    if strategy not in TINYBERT_STRATEGIES:
        raise ConfigError(f"TinyBERT layer mapping must be one of {', '.join(TINYBERT_STRATEGIES)} (got {strategy!r})")
    if not 1 <= n_student <= n_teacher:
        raise ConfigError(f"TinyBERT needs 1 <= student layers <= teacher layers (got {n_student} and {n_teacher})")
    if strategy == "uniform":
        # m*N/M, rounded half up when N is not a multiple of M (e.g. MiniLM's 6 layers into 4: 2, 3, 5, 6)
        g = {m: (2 * m * n_teacher + n_student) // (2 * n_student) for m in range(1, n_student + 1)}
    elif strategy == "top":
        g = {m: n_teacher - n_student + m for m in range(1, n_student + 1)}
    else:
        g = {m: m for m in range(1, n_student + 1)}
    return check_map({0: 0, **g}, n_teacher, n_student, f"TinyBERT {strategy} mapping")


def attention_kinds(config) -> list[str]:
    """'global' or 'local' per layer (0-based) of an encoder config: ModernBERT's alternate (layer i is global when
    i % global_attn_every_n_layers == 0), every other member's layers attend globally."""
    is_global = getattr(config, "is_global", None)
    if is_global is None:
        return ["global"] * config.num_layers
    return ["global" if is_global(i) else "local" for i in range(config.num_layers)]


def global_every_for(kinds: list[str], preferred: int) -> int:
    """The global_attn_every_n_layers whose pattern (layer i global iff i % n == 0) is `kinds` (the kinds of the
    layers a student copies, in student order): `preferred` (the teacher's) when it fits, else the smallest that
    does; a ConfigError when none does."""
    fits = lambda n: all((kind == "global") == (i % n == 0) for i, kind in enumerate(kinds))
    for n in (preferred, *range(1, len(kinds) + 1)):
        if fits(n):
            return n
    raise ConfigError(f"copied layers of attention kinds {kinds} follow no 'global every n layers' pattern (a "
                      "ModernBERT student's layer i is global when i % n == 0); choose teacher layers whose kinds "
                      "do, e.g. starting with a global one")
