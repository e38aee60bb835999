"""The human-readable evaluation report: RUN/eval/report.md with summary tables, and next to it
`pretrain_loss.png` (the pretraining curves from RUN/pretrain/metrics.jsonl) and `finetune_dev_accuracy.png`
(dev accuracy per fine-tuning epoch, pretrained vs random init vs majority class). Everything is made from the
validated results dict and the metrics file, never from training internals.

    from evaluation.report import write_report
    write_report(results, run_dir / "eval", run_dir / "pretrain" / "metrics.jsonl")
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from bertfactory.errors import ContractError
from bertfactory.io import AtomicFile, atomic_write_text

logger = logging.getLogger(__name__)

REPORT_FILE = "report.md"
PRETRAIN_PLOT = "pretrain_loss.png"
FINETUNE_PLOT = "finetune_dev_accuracy.png"
MODEL_LABELS = {"pretrained": "pretrained", "random_init": "random init", "majority": "majority class"}


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


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    # A fixed Software tag keeps the PNG bytes independent of the matplotlib version string.
    with AtomicFile(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight", metadata={"Software": "bertfactory"})


def plot_pretrain_curves(records: list[dict], path: Path) -> None:
    plt = _pyplot()
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
    _save(fig, path)
    plt.close(fig)


def plot_finetune_curves(results: dict, path: Path) -> None:
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    tasks = results["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 3.8), squeeze=False)
    for ax, (task, per) in zip(axes[0], sorted(tasks.items())):
        for model in ("pretrained", "random_init"):
            if per.get(model):
                epochs = per[model]["epochs"]
                ax.plot([e["epoch"] for e in epochs], [e["dev_accuracy"] for e in epochs], marker="o",
                        label=MODEL_LABELS[model])
        ax.axhline(per["majority"]["dev_accuracy"], linestyle="--", color="gray", label=MODEL_LABELS["majority"])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("fine-tuning epoch")
        ax.set_ylabel("dev accuracy")
        ax.set_title(task)
        ax.grid(alpha=0.3)
        ax.legend()
    _save(fig, path)
    plt.close(fig)


def _f(v, digits: int = 4) -> str:
    return "—" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def render_markdown(results: dict, pretrain_plot: str | None, finetune_plot: str | None, metrics_note: str) -> str:
    ck = results["checkpoint"]
    m = ck["model"]
    lines = [
        "# Evaluation report",
        "",
        f"Checkpoint `{ck['path']}` — {m.get('num_layers')} layers, hidden {m.get('hidden_size')}, "
        f"{m.get('num_heads')} heads, vocabulary {m.get('vocab_size')}, {ck['num_parameters']:,} parameters; "
        f"model.safetensors sha256 `{ck['model_sha256'][:16]}…`.",
        "",
        "## Intrinsic (held-out shards)",
        "",
    ]
    intr = results.get("intrinsic")
    if intr:
        lines += [
            f"{intr['instances']:,} instances of split `{intr['split']}`, mask variant {intr['mask_variant']}, "
            f"{intr['masked_tokens']:,} masked tokens.",
            "",
            "| metric | value |",
            "|---|---|",
            f"| MLM accuracy | {_f(intr['mlm_accuracy'])} (unigram baseline {_f(intr['unigram_mlm_accuracy'])}, "
            f"chance {intr['chance_mlm_accuracy']:.2g}) |",
            f"| MLM loss | {_f(intr['mlm_loss'])} (unigram baseline {_f(intr['unigram_mlm_loss'])}) |",
            f"| MLM perplexity | {_f(intr['mlm_perplexity'], 2)} |",
            f"| NSP accuracy | {_f(intr['nsp_accuracy'])} |",
            f"| NSP loss | {_f(intr['nsp_loss'])} |",
        ]
    else:
        lines.append("Not run (`evaluate.intrinsic.enabled: false`).")
    lines += ["", "## Fine-tuning", ""]
    ft = results["config"].get("finetune", {})
    lines.append(f"Same budget for every model: {ft.get('epochs')} epochs, batch {ft.get('batch_size')}, lr "
                 f"{ft.get('learning_rate')}, warmup {ft.get('warmup_ratio')}, max {ft.get('max_seq_len')} tokens, "
                 f"seed {ft.get('seed')}; the epoch with the best dev accuracy is scored on test.")
    for task, per in sorted(results["tasks"].items()):
        data = per["data"]
        sizes = data["sizes"]
        dropped = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in sorted(data["dropped"].items())) or "none"
        lines += [
            "",
            f"### {task}",
            "",
            f"Split train/dev/test = {sizes['train']:,}/{sizes['dev']:,}/{sizes['test']:,} ({data['split_method']}); "
            f"dropped: {dropped}.",
            "",
            "| model | test accuracy | 95 % interval | test F1 | dev accuracy | best epoch |",
            "|---|---|---|---|---|---|",
        ]
        for model in ("pretrained", "random_init", "majority"):
            s = per.get(model)
            if s:
                ci = s.get("accuracy_ci95")
                interval = f"{_f(ci[0])} – {_f(ci[1])}" if ci else "—"
                lines.append(f"| {MODEL_LABELS[model]} | {_f(s['accuracy'])} | {interval} | {_f(s.get('f1'))} | "
                             f"{_f(s['dev_accuracy'])} | {s.get('best_epoch', '—')} |")
        cmp = per.get("comparison")
        if cmp:
            verdict = ("unlikely to be chance" if cmp["mcnemar_p_value"] < 0.05
                       else "not distinguishable from chance at this test-set size")
            lines += ["", f"Pretrained minus random init: {100 * cmp['accuracy_difference']:+.1f} accuracy points; "
                      f"{cmp['pretrained_only_correct']} test examples only the pretrained model gets right, "
                      f"{cmp['random_init_only_correct']} only the random-init one; McNemar p = "
                      f"{cmp['mcnemar_p_value']:.3g} ({verdict})."]
    lines += ["", "## Curves", ""]
    lines.append(f"![pretraining loss]({pretrain_plot})" if pretrain_plot else metrics_note)
    if finetune_plot:
        lines += ["", f"![fine-tuning dev accuracy]({finetune_plot})"]
    timings = results.get("timings", {})
    if timings:
        lines += ["", "## Timings", "", "| part | seconds |", "|---|---|"]
        lines += [f"| {k} | {v:.1f} |" for k, v in sorted(timings.items())]
    return "\n".join(lines) + "\n"


def write_report(results: dict, out_dir: Path, metrics_path: Path | None) -> Path:
    """Write the PNGs and report.md into `out_dir`; returns the report path. A missing metrics file (a checkpoint
    not trained in this run directory) leaves out the pretraining plot with a note saying so."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pretrain_plot = None
    note = f"No pretraining curve: {metrics_path} does not exist."
    if metrics_path is not None and Path(metrics_path).is_file():
        records = read_pretrain_metrics(Path(metrics_path))
        if records:
            plot_pretrain_curves(records, out_dir / PRETRAIN_PLOT)
            pretrain_plot = PRETRAIN_PLOT
        else:
            note = f"No pretraining curve: {metrics_path} holds no records."
    finetune_plot = None
    if results["tasks"]:
        plot_finetune_curves(results, out_dir / FINETUNE_PLOT)
        finetune_plot = FINETUNE_PLOT
    for name, made in ((PRETRAIN_PLOT, pretrain_plot), (FINETUNE_PLOT, finetune_plot)):
        if made is None and (out_dir / name).exists():  # a plot of an earlier run would contradict this report
            (out_dir / name).unlink()
    path = out_dir / REPORT_FILE
    atomic_write_text(path, render_markdown(results, pretrain_plot, finetune_plot, note))
    logger.info("wrote %s", path)
    return path
