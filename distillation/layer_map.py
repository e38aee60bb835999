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
