"""Minimal detectable differences (MDD): how large an accuracy difference a task's test set can show at all, at
significance `alpha` (two-sided) with probability `power`. A difference below a task's MDD is not evidence either
way, so an evaluation whose differences sit below it cannot tell the models apart (issue 18).

    from evaluation.mdd import binomial_mdd, mcnemar_mdd, task_mdd
    binomial_mdd(400, 0.5)          # ~0.070: a model must reach ~57 % to be told apart from a 50 % majority class
    mcnemar_mdd(400, 0.3)           # ~0.080: two models that disagree on 30 % of 400 paired examples
    task_mdd(400, majority_accuracy=0.5, discordant_fraction=0.3)   # both, as results.json stores them

Both are exact (binomial tails, no normal approximation):
- `binomial_mdd`: one model against a fixed accuracy p0 (the majority class's) on n test examples. The test rejects
  when the count of correct answers reaches the smallest k with P(X >= k | p0) <= alpha / 2; the MDD is the smallest
  p1 - p0 with P(X >= k | p1) >= power.
- `mcnemar_mdd`: two models on the same n examples (McNemar's test, evaluation.metrics.mcnemar): only the m = n x d
  examples exactly one model gets right count, and the test is the binomial test of their split at 1/2. With a share
  q of them won by model A, the accuracy difference is d (2q - 1); the MDD is the smallest one the test finds with
  probability `power`. d is the discordant fraction the two models actually showed (or an assumed one).
"""

from __future__ import annotations

from scipy.stats import binom

ALPHA = 0.05
POWER = 0.8
_BISECTION_STEPS = 60  # the probability interval halves each step: 2^-60 is far below any reported digit


def _upper_critical(n: int, p0: float, alpha: float) -> int | None:
    """Smallest k with P(X >= k | n, p0) <= alpha / 2 (the two-sided test's upper rejection region), None if even
    k = n is not significant."""
    k = int(binom.isf(alpha / 2, n, p0)) + 1  # isf gives the largest k with P(X > k) > alpha/2, up to rounding
    while k > 0 and binom.sf(k - 2, n, p0) <= alpha / 2:  # step down while k - 1 still rejects
        k -= 1
    while k <= n and binom.sf(k - 1, n, p0) > alpha / 2:
        k += 1
    return k if k <= n else None


def _smallest_rate_with_power(n: int, k: int, p0: float, power: float) -> float:
    """Smallest p1 in [p0, 1] with P(X >= k | n, p1) >= power (the power rises with p1)."""
    low, high = p0, 1.0
    for _ in range(_BISECTION_STEPS):
        mid = (low + high) / 2
        if binom.sf(k - 1, n, mid) >= power:
            high = mid
        else:
            low = mid
    return high


def _check(n: int, alpha: float, power: float) -> None:
    if n < 1:
        raise ValueError(f"a test set needs at least one example (got n={n})")
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must lie in (0, 1) (got alpha={alpha}, power={power})")


def binomial_mdd(n: int, p0: float, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """Smallest accuracy gain over a fixed accuracy `p0` that n test examples detect (see the module docstring);
    None when no accuracy up to 1 is detectable (n too small for p0)."""
    _check(n, alpha, power)
    if not 0.0 <= p0 < 1.0:
        raise ValueError(f"the reference accuracy must lie in [0, 1) (got {p0})")
    k = _upper_critical(n, p0, alpha)
    if k is None or binom.sf(k - 1, n, 1.0) < power:
        return None
    return _smallest_rate_with_power(n, k, p0, power) - p0


def mcnemar_mdd(n: int, discordant_fraction: float, alpha: float = ALPHA,
                power: float = POWER) -> float | None:
    """Smallest accuracy difference between two models on the same n examples that McNemar's exact test detects,
    when a share `discordant_fraction` of the examples is right for exactly one of them; None when none is (too
    few discordant examples: with m of them the smallest p-value is 2^(1-m))."""
    _check(n, alpha, power)
    if not 0.0 <= discordant_fraction <= 1.0:
        raise ValueError(f"the discordant fraction must lie in [0, 1] (got {discordant_fraction})")
    m = round(n * discordant_fraction)
    if m == 0:
        return None
    k = _upper_critical(m, 0.5, alpha)
    if k is None:
        return None
    q = _smallest_rate_with_power(m, k, 0.5, power)
    return (m / n) * (2 * q - 1)


def task_mdd(n: int, majority_accuracy: float | None = None, discordant_fraction: float | None = None,
             alpha: float = ALPHA, power: float = POWER) -> dict:
    """A task's MDDs at its test size, as results.json stores them (`tasks.<name>.mdd`)."""
    out: dict = {"test_examples": n, "alpha": alpha, "power": power}
    if majority_accuracy is not None:
        out["vs_majority"] = binomial_mdd(n, majority_accuracy, alpha, power)
    if discordant_fraction is not None:
        out["discordant_fraction"] = discordant_fraction
        out["paired"] = mcnemar_mdd(n, discordant_fraction, alpha, power)
    return out
