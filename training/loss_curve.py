"""The pretraining loss curve: RUN/pretrain/metrics.jsonl -> a PNG of the window losses (and the learning rate).

    from training.loss_curve import write_loss_curve
    write_loss_curve(Path("runs/local/pretrain/metrics.jsonl"), Path("runs/local/pretrain/loss_curve.png"))

Pretraining writes RUN/pretrain/loss_curve.png at its end; the evaluation report (evaluation/report.py) draws the
same curves as RUN/eval/pretrain_loss.png and uses `pyplot` / `save_png` for its own figures. matplotlib is
imported only when something is plotted.
"""

from __future__ import annotations

import json
from pathlib import Path

from bertfactory.errors import ContractError
from bertfactory.io import AtomicFile


def read_pretrain_metrics(path: Path) -> list[dict]:
    """metrics.jsonl -> records with at least `step` (int) and `loss` (number), in file order."""
    records = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ContractError(f"{path}:{lineno}: not a JSON object ({err.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int) or \
                not isinstance(record.get("loss"), (int, float)):
            raise ContractError(f"{path}:{lineno}: a metrics record needs an integer 'step' and a numeric 'loss'")
        records.append(record)
    return records


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only; never needs a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: Path) -> None:
    """Write `fig` to `path` atomically."""
    fig.tight_layout()
    # A fixed Software tag keeps the PNG bytes independent of the matplotlib version string.
    with AtomicFile(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight", metadata={"Software": "bertfactory"})


def plot_pretrain_curves(records: list[dict], path: Path) -> None:
    """The window losses (loss, mlm_loss, nsp_loss) over the steps, and beside them the learning rate."""
    plt = pyplot()
    has_lr = any("lr" in r for r in records)
    fig, axes = plt.subplots(1, 2 if has_lr else 1, figsize=(10 if has_lr else 6, 3.8), squeeze=False)
    ax = axes[0][0]
    for key in ("loss", "mlm_loss", "nsp_loss"):
        points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
        if points:
            ax.plot(*zip(*points), label=key, marker="." if len(points) < 30 else None)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (window mean)")
    ax.set_title("pretraining loss")
    ax.grid(alpha=0.3)
    ax.legend()
    if has_lr:
        ax = axes[0][1]
        ax.plot([r["step"] for r in records if "lr" in r], [r["lr"] for r in records if "lr" in r])
        ax.set_xlabel("step")
        ax.set_ylabel("learning rate")
        ax.set_title("schedule")
        ax.grid(alpha=0.3)
    save_png(fig, path)
    plt.close(fig)


def write_loss_curve(metrics_path: Path, png_path: Path) -> None:
    """The curves of `metrics_path` as `png_path`; nothing when the file is missing or holds no record."""
    if metrics_path.is_file() and (records := read_pretrain_metrics(metrics_path)):
        plot_pretrain_curves(records, png_path)
