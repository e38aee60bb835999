"""The human-readable evaluation report: RUN/eval/report.md with summary tables, and next to it
`pretrain_loss.png` (the pretraining curves from RUN/pretrain/metrics.jsonl), `finetune_dev_curves.png` (learning
curves: each task's dev primary metric per fine-tuning epoch, mean over seeds with a min-max band, pretrained vs
random init, the majority baseline dashed), `task_scores.png` (per task, the test primary metric of every model
with error bars of one std over seeds) and `confusion_<task>.png` (classification: test gold x predicted of the
pretrained model, summed over seeds). Other checkpoints (`compared`) appear beside ours in every table and plot,
and zero-shot cross-lingual targets get a table of their own. Everything is made from the validated results dict
and the metrics file, never from training internals. `render_comparison` makes the side-by-side table of several runs
(`bertfactory report RUN [RUN ...]`).

    from evaluation.report import write_report
    write_report(results, run_dir / "eval", run_dir / "pretrain" / "metrics.jsonl")
"""

from __future__ import annotations

import logging
from pathlib import Path

from bertfactory.io import atomic_write_text
from evaluation.results import nsp_one_label_note
# the pretraining curves and the figure helpers live with pretraining, which writes the same curve at its end
from training.loss_curve import plot_pretrain_curves, read_pretrain_metrics
from training.loss_curve import pyplot as _pyplot, save_png as _save

logger = logging.getLogger(__name__)

REPORT_FILE = "report.md"
PRETRAIN_PLOT = "pretrain_loss.png"
FINETUNE_PLOT = "finetune_dev_curves.png"
SCORES_PLOT = "task_scores.png"
MODEL_LABELS = {"pretrained": "pretrained", "random_init": "random init", "tfidf_logreg": "TF-IDF + logistic regression",
                "majority": "majority"}


MODELS = ("pretrained", "random_init", "tfidf_logreg", "majority")


def models_of(per: dict) -> list[tuple[str, str, dict]]:
    """(key, row label, scores) of every model a task has: ours, the baselines, then each compared checkpoint
    (key `compared:<label>`)."""
    rows = [(m, model_label(m, per[m]), per[m]) for m in MODELS if per.get(m)]
    rows += [(f"compared:{label}", f"checkpoint `{label}`", scores) for label, scores in (per.get("compared") or {}).items()]
    return rows


def _colour(key: str, compared: list[str]) -> str:
    """One colour per model across tasks: the four fixed models first, then each compared checkpoint."""
    if key in MODELS:
        return f"C{MODELS.index(key)}"
    return f"C{(len(MODELS) + compared.index(key.split(':', 1)[1])) % 10}"


def _mean_curve(runs: list[dict]) -> tuple[list[int], list[float], list[float], list[float]]:
    """Epoch -> mean, min, max dev score over the runs that reached it."""
    by_epoch: dict[int, list[float]] = {}
    for run in runs:
        for e in run["epochs"]:
            if e.get("dev_score") is not None:
                by_epoch.setdefault(e["epoch"], []).append(e["dev_score"])
    epochs = sorted(by_epoch)
    return (epochs, [sum(by_epoch[e]) / len(by_epoch[e]) for e in epochs], [min(by_epoch[e]) for e in epochs],
            [max(by_epoch[e]) for e in epochs])


def plot_finetune_curves(results: dict, path: Path) -> None:
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    tasks = results["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    compared = list(results.get("compared_checkpoints") or {})
    for ax, (task, per) in zip(axes[0], sorted(tasks.items())):
        primary = per["primary_metric"]
        for key, label, scores in models_of(per):
            if "runs" in scores:  # the fine-tuned models; baselines have no epochs
                epochs, mean, low, high = _mean_curve(scores["runs"])
                if epochs:
                    colour = _colour(key, compared)
                    ax.plot(epochs, mean, marker="o", label=label.replace("`", ""), color=colour)
                    ax.fill_between(epochs, low, high, alpha=0.2, color=colour)
        majority = (per.get("majority") or {}).get("dev", {}).get(primary)
        if majority is not None:
            ax.axhline(majority, linestyle="--", color="gray", label=MODEL_LABELS["majority"])
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("fine-tuning epoch")
        ax.set_ylabel(f"dev {primary}")
        ax.set_title(task)
        ax.grid(alpha=0.3)
        ax.legend()
    _save(fig, path)
    plt.close(fig)


def plot_task_scores(results: dict, path: Path) -> None:
    plt = _pyplot()
    tasks = sorted(results["tasks"].items())
    compared = list(results.get("compared_checkpoints") or {})
    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.6), squeeze=False)
    for ax, (task, per) in zip(axes[0], tasks):
        primary = per["primary_metric"]
        names, means, stds, colours = [], [], [], []
        for key, label, scores in models_of(per):
            if scores.get(primary) is not None:
                names.append(label.replace("`", ""))
                means.append(scores[primary])
                stds.append(scores.get(f"{primary}_std") or 0.0)
                colours.append(_colour(key, compared))
        ax.bar(range(len(names)), means, yerr=stds, capsize=4, color=colours)
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right")
        ax.set_ylabel(f"test {primary} (mean ± std over seeds)")
        ax.set_title(task)
        ax.grid(alpha=0.3, axis="y")
    _save(fig, path)
    plt.close(fig)


def plot_confusion(matrix: list[list[int]], labels: list[str], task: str, path: Path) -> None:
    plt = _pyplot()
    size = max(3.5, 0.45 * len(labels) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    peak = max((v for row in matrix for v in row), default=0)
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            ax.text(j, i, str(v), ha="center", va="center", color="white" if v > peak / 2 else "black", fontsize=8)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    ax.set_title(f"{task}: pretrained, test (summed over seeds)")
    _save(fig, path)
    plt.close(fig)


def model_label(model: str, scores: dict) -> str:
    """The row / bar label; the TF-IDF baseline of a regression task is Ridge regression, and says so."""
    if model == "tfidf_logreg" and (scores.get("details") or {}).get("model") == "Ridge":
        return "TF-IDF + Ridge regression"
    return MODEL_LABELS[model]


def _f1_class(per: dict, metrics: list[str]) -> str:
    """Which class a two-label task's `f1` is of (label 1, evaluation/scoring.py): a task file's labels are sorted,
    so it need not be the class the reader thinks of as positive."""
    names = per["data"].get("label_names") or []
    if "f1" not in metrics or per["task_type"] not in ("classification", "pair-classification") or len(names) != 2:
        return ""
    return f" f1 is the F1 of the class `{names[1]}` (label 1)."


def _nsp_note(intrinsic: dict) -> str:
    """` (<why>)` after an NSP accuracy over one label only (evaluation/results.py), else ''."""
    note = nsp_one_label_note(intrinsic)
    return f" ({note})" if note else ""


def _f(v, digits: int = 4) -> str:
    return "—" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _pm(scores: dict | None, metric: str, seeded: bool | None = None) -> str:
    """mean ± std for fine-tuned models (runs over seeds), the plain value for deterministic baselines."""
    if not scores or scores.get(metric) is None:
        return "—"
    seeded = "runs" in scores if seeded is None else seeded
    std = scores.get(f"{metric}_std")
    return f"{scores[metric]:.4f} ± {std:.4f}" if seeded and std is not None else f"{scores[metric]:.4f}"


def task_metrics(per: dict) -> list[str]:
    """The metrics present for this task, primary first, in the scoring order."""
    from .scoring import METRICS

    present = [m for m in METRICS[per["task_type"]] if any(s.get(m) is not None for _, _, s in models_of(per))]
    primary = per["primary_metric"]
    return [primary] + [m for m in present if m != primary]


def _describe_checkpoint(ck: dict) -> str:
    m = ck["model"]
    return (f"`{ck['path']}` — {m.get('num_layers')} layers, hidden {m.get('hidden_size')}, {m.get('num_heads')} "
            f"heads, vocabulary {m.get('vocab_size')}, {ck['num_parameters']:,} parameters; model.safetensors sha256 "
            f"`{ck['model_sha256'][:16]}…`")


def truncation_note(per: dict, max_seq_len: int | None, truncated: dict | None = None) -> str:
    """How many inputs max_seq_len cut, per split, in words (tagging: words left without a prediction)."""
    truncated = per["data"].get("truncated") if truncated is None else truncated
    limit = f"{max_seq_len}-token" if max_seq_len else "max_seq_len"
    if per["task_type"] == "squad":
        return f"long contexts are read in overlapping {limit} windows, nothing is cut"
    if not truncated:
        return "not counted"
    sizes = per["data"]["sizes"]
    if not any(truncated.values()):
        return f"no input longer than the {limit} limit" if per["task_type"] != "tagging" else \
            f"every word within the {limit} limit"
    if per["task_type"] == "tagging":
        counts = ", ".join(f"{split} {truncated.get(split, 0):,}" for split in ("train", "dev", "test"))
        return f"words beyond the {limit} limit (tagged O, still scored): {counts}"
    counts = ", ".join(f"{split} {truncated.get(split, 0):,} of {sizes[split]:,}" for split in ("train", "dev", "test"))
    return f"inputs cut at the {limit} limit: {counts}"


def _task_max_seq_len(results: dict, task: str) -> int | None:
    config = results.get("config", {})
    override = ((config.get("tasks") or {}).get(task) or {}).get("finetune", {}).get("max_seq_len")
    return override or config.get("finetune", {}).get("max_seq_len")


def render_markdown(results: dict, plots: dict[str, str | None], metrics_note: str) -> str:
    lines = [
        "# Evaluation report",
        "",
        f"Checkpoint {_describe_checkpoint(results['checkpoint'])}.",
    ]
    compared = results.get("compared_checkpoints") or {}
    if compared:
        lines += ["", "Compared checkpoints, fine-tuned with the same settings on the same splits (each with its own "
                  "tokenizer):", ""]
        lines += [f"- `{label}`: {_describe_checkpoint(ck)}." for label, ck in compared.items()]
    lines += ["", "## Intrinsic (held-out shards)", ""]
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
            f"| NSP accuracy | {_f(intr.get('nsp_accuracy'))}{_nsp_note(intr)} |",  # absent: no sentence-pair head
            f"| NSP loss | {_f(intr.get('nsp_loss'))} |",
        ]
    else:
        lines.append("Not run (`evaluate.intrinsic.enabled: false`).")
    lines += ["", "## Fine-tuning", ""]
    ft = results["config"].get("finetune", {})
    grid = ft.get("learning_rates") or [ft.get("learning_rate")]
    extras = [f"layer-wise lr decay {ft.get('layerwise_lr_decay')}" if ft.get("layerwise_lr_decay", 1.0) != 1.0 else "",
              "gradual unfreezing" if ft.get("gradual_unfreezing") else "",
              f"early stopping after {ft.get('early_stopping_patience')} epochs" if ft.get("early_stopping_patience") else ""]
    lines.append(f"Same fine-tuning settings for every neural model (tasks may override them): up to {ft.get('epochs')} epochs, batch "
                 f"{ft.get('batch_size')}, lr grid {grid}, {ft.get('schedule')} schedule with warmup "
                 f"{ft.get('warmup_ratio')}, max {ft.get('max_seq_len')} tokens, {ft.get('num_seeds')} seed(s) from "
                 f"{ft.get('seed')}{''.join(', ' + e for e in extras if e)}. Per run the epoch with the best dev score "
                 f"is scored on test; numbers are mean ± std over seeds (std: sample, ddof 1) at the learning rate "
                 f"with the best mean dev score.")
    for task, per in sorted(results["tasks"].items()):
        data = per["data"]
        sizes = data["sizes"]
        dropped = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in sorted(data["dropped"].items())) or "none"
        metrics = task_metrics(per)
        max_seq_len = _task_max_seq_len(results, task)
        lines += [
            "",
            f"### {task} ({per['task_type']}, {per['language']})",
            "",
            f"Split train/dev/test = {sizes['train']:,}/{sizes['dev']:,}/{sizes['test']:,} ({data['split_method']}); "
            f"dropped: {dropped}; truncation: {truncation_note(per, max_seq_len)}. Primary metric: "
            f"**{per['primary_metric']}**.{_f1_class(per, metrics)}",
            "",
            "| model | " + " | ".join(f"test {m}" for m in metrics) + f" | dev {metrics[0]} | lr |",
            "|---" * (len(metrics) + 3) + "|",
        ]
        own = per.get("settings")
        if own and own != ft:  # evaluated by another `evaluate` call (results add up, evaluation/parts.py)
            lines[-2:-2] = [f"Evaluated with its own settings: up to {own.get('epochs')} epochs, batch "
                            f"{own.get('batch_size')}, lr grid {own.get('learning_rates') or [own.get('learning_rate')]}, "
                            f"max {own.get('max_seq_len')} tokens, {own.get('num_seeds')} seed(s) from {own.get('seed')}.",
                            ""]
        for _, label, s in models_of(per):
            lr = _f(s.get("learning_rate"), 6) if "learning_rate" in s else "—"
            lines.append(f"| {label} | " + " | ".join(_pm(s, m) for m in metrics) +
                         f" | {_pm(s.get('dev'), metrics[0], 'runs' in s)} | {lr} |")
        for label, s in (per.get("compared") or {}).items():
            if s.get("truncated") != data.get("truncated"):  # another tokenizer cuts other inputs
                lines += ["", f"Truncation with `{label}`'s tokenizer: {truncation_note(per, max_seq_len, s.get('truncated'))}."]
        cmp = per.get("comparison")
        if cmp and cmp.get("difference") is not None:
            text = f"Pretrained minus random init: {cmp['difference']:+.4f} {cmp['primary_metric']}"
            if cmp.get("mcnemar_p_value") is not None:
                verdict = ("unlikely to be chance" if cmp["mcnemar_p_value"] < 0.05
                           else "not distinguishable from chance at this test-set size")
                text += (f"; seed {cmp['seed']}: {cmp['pretrained_only_correct']} test examples only the pretrained "
                         f"model gets right, {cmp['random_init_only_correct']} only the random-init one; McNemar p = "
                         f"{cmp['mcnemar_p_value']:.3g} ({verdict})")
            lines += ["", text + "."]
        if plots.get(f"confusion:{task}"):
            lines += ["", f"![confusion matrix {task}]({plots[f'confusion:{task}']})"]
    fb = results.get("feature_based")
    if fb:
        from .features import render_table

        lines += ["", "## Feature-based (frozen encoder)", "", render_table(fb)]
    for task, transfer in sorted((results.get("crosslingual") or {}).items()):
        lines += ["", *render_transfer(task, transfer, results["tasks"].get(task, {}))]
    lines += ["", "## Curves", ""]
    lines.append(f"![pretraining loss]({plots['pretrain']})" if plots.get("pretrain") else metrics_note)
    if plots.get("finetune"):
        lines += ["", f"![fine-tuning learning curves]({plots['finetune']})"]
    if plots.get("scores"):
        lines += ["", f"![test scores per task]({plots['scores']})"]
    timings = results.get("timings", {})
    if timings:
        lines += ["", "## Timings", "", "| part | seconds |", "|---|---|"]
        lines += [f"| {k} | {v:.1f} |" for k, v in sorted(timings.items())]
    return "\n".join(lines) + "\n"


def render_transfer(task: str, transfer: dict, source: dict) -> list[str]:
    """The zero-shot table of one source task: each target's primary metric per fine-tuned model, and the source
    language's own test score for scale."""
    primary = transfer["primary_metric"]
    labels = list(dict.fromkeys(label for t in transfer["targets"].values() for label in (t.get("compared") or {})))
    columns = [("pretrained", "pretrained")] + \
        ([("random_init", "random init")] if any(t.get("random_init") for t in transfer["targets"].values()) else []) + \
        [(f"compared:{label}", f"`{label}`") for label in labels]

    def scores(entry: dict, key: str) -> dict | None:
        return (entry.get("compared") or {}).get(key.split(":", 1)[1]) if key.startswith("compared:") else entry.get(key)

    lines = [f"## Zero-shot cross-lingual transfer from {task} ({transfer['source_language']})", "",
             f"Fine-tuned on {task}'s train/dev split (learning rate and epoch chosen on its dev), then scored unchanged "
             f"on every example of each target file; test {primary}, mean ± std over seeds.", "",
             "| target | language | examples | " + " | ".join(c for _, c in columns) + " |",
             "|---" * (len(columns) + 3) + "|",
             f"| {task} (source, test) | {transfer['source_language']} | {source.get('data', {}).get('sizes', {}).get('test', '—')} | " +
             " | ".join(_pm(scores(source, k), primary) for k, _ in columns) + " |"]
    for key, entry in transfer["targets"].items():
        lines.append(f"| {key} | {entry['language']} | {entry['data']['examples']:,} | " +
                     " | ".join(_pm(scores(entry, k), primary, True) for k, _ in columns) + " |")
    return lines


def render_comparison(runs: list[tuple[str, dict]]) -> str:
    """Markdown comparing several runs' results side by side: per task, each metric's pretrained mean ± std per
    run, then the random-init and baseline primary metric."""
    names = [name for name, _ in runs]
    lines = ["# Runs compared", "", "| run | checkpoint | layers / hidden | parameters |", "|---|---|---|---|"]
    for name, r in runs:
        m = r["checkpoint"]["model"]
        lines.append(f"| {name} | `{r['checkpoint']['path']}` | {m.get('num_layers')} / {m.get('hidden_size')} | "
                     f"{r['checkpoint']['num_parameters']:,} |")
    intrinsic = [(n, r.get("intrinsic")) for n, r in runs]
    if any(i for _, i in intrinsic):
        lines += ["", "## Intrinsic", "", "| metric | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for metric in ("mlm_accuracy", "mlm_perplexity", "nsp_accuracy"):
            lines.append(f"| {metric} | " + " | ".join(
                _f((i or {}).get(metric)) + (" (one label only)" if metric == "nsp_accuracy" and
                                             nsp_one_label_note(i or {}) else "") for _, i in intrinsic) + " |")
    # a task name with another task type in another run (two files named train.tsv) is another task: its own
    # section, as the metrics of one type are not those of the other
    sections = sorted({(t, per["task_type"]) for _, r in runs for t, per in r["tasks"].items()})
    for task, task_type in sections:
        pers = [p if (p := r["tasks"].get(task)) and p["task_type"] == task_type else None for _, r in runs]
        known = next(p for p in pers if p)
        lines += ["", f"## {task} ({task_type})", ""]
        others = sorted({t for t_, t in sections if t_ == task and t != task_type})
        if others:
            lines += [f"`{task}` is a {' / '.join(others)} task in other runs (its own section): another task under "
                      "the same name.", ""]
        data = {p["data"]["source_sha256"] for p in pers if p}
        if len(data) > 1:
            read = ", ".join(f"{n} {p['data']['source_sha256'][:12]}…" for n, p in zip(names, pers) if p)
            lines += [f"The runs read other data for `{task}` (source sha256: {read}): their scores are not on one "
                      "test set.", ""]
        lines += ["| model · metric | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for metric in task_metrics(known):
            lines.append(f"| pretrained · {metric} | " + " | ".join(_pm((p or {}).get("pretrained"), metric) for p in pers) + " |")
        primary = known["primary_metric"]
        for model in MODELS[1:]:
            present = [(p or {}).get(model) for p in pers]
            if any(present):  # a section holds one task type: a regression task's TF-IDF baseline is Ridge in every run
                lines.append(f"| {model_label(model, next(s for s in present if s))} · {primary} | " +
                             " | ".join(_pm(scores, primary) for scores in present) + " |")
        for label in dict.fromkeys(label for p in pers for label in ((p or {}).get("compared") or {})):
            lines.append(f"| checkpoint `{label}` · {primary} | " +
                         " | ".join(_pm(((p or {}).get("compared") or {}).get(label), primary) for p in pers) + " |")
    return "\n".join(lines) + "\n"


def write_report(results: dict, out_dir: Path, metrics_path: Path | None) -> Path:
    """Write the PNGs and report.md into `out_dir`; returns the report path. A missing metrics file (a checkpoint
    not trained in this run directory) leaves out the pretraining plot with a note saying so."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):  # a plot of an earlier run would contradict this report
        old.unlink()
    plots: dict[str, str | None] = {}
    note = f"No pretraining curve: {metrics_path} does not exist."
    if metrics_path is not None and Path(metrics_path).is_file():
        records = read_pretrain_metrics(Path(metrics_path))
        if records:
            plot_pretrain_curves(records, out_dir / PRETRAIN_PLOT)
            plots["pretrain"] = PRETRAIN_PLOT
        else:
            note = f"No pretraining curve: {metrics_path} holds no records."
    if results["tasks"]:
        plot_finetune_curves(results, out_dir / FINETUNE_PLOT)
        plot_task_scores(results, out_dir / SCORES_PLOT)
        plots["finetune"], plots["scores"] = FINETUNE_PLOT, SCORES_PLOT
        for task, per in sorted(results["tasks"].items()):
            matrix = per["pretrained"].get("confusion_matrix")
            if matrix:
                name = f"confusion_{task}.png"
                plot_confusion(matrix, per["data"]["label_names"], task, out_dir / name)
                plots[f"confusion:{task}"] = name
    path = out_dir / REPORT_FILE
    atomic_write_text(path, render_markdown(results, plots, note))
    logger.info("wrote %s", path)
    return path
