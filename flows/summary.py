"""The console summary printed after `bertfactory run`: corpus, pretraining and evaluation in one table,
read from the run directory's contract files."""

from __future__ import annotations

import json
from pathlib import Path


def fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 100 else f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "—" if v is None else str(v)


def _manifest(run_dir: Path) -> dict:
    from preprocessing.shards import read_manifest

    return read_manifest(run_dir / "shards").model_dump(mode="json") if (run_dir / "shards/manifest.json").is_file() else {}


def _results(run_dir: Path) -> dict:
    from evaluation.results import read_results

    return read_results(run_dir / "eval") if (run_dir / "eval/results.json").is_file() else {}


def summary_rows(run_dir: Path) -> list[tuple[str, str, object]]:
    rows: list[tuple[str, str, object]] = []
    manifest = _manifest(run_dir)
    if manifest:
        c = manifest["counts"]
        rows += [("corpus", "documents kept / read", f"{fmt(c.get('docs_kept'))} / {fmt(c.get('docs_read'))}")]
        for split, info in manifest["splits"].items():
            rows.append(("corpus", f"instances ({split})", info["rows"]))
            rows.append(("corpus", f"tokens ({split})", info["tokens"]))
    metrics_path = run_dir / "pretrain/metrics.jsonl"
    if metrics_path.is_file():
        lines = [json.loads(x) for x in metrics_path.read_text().splitlines() if x.strip()]
        if lines:
            last = lines[-1]
            rows.append(("pretrain", "steps", last.get("step")))
            for k in ["loss"] + sorted(k for k in last if k.endswith("_loss")):  # every member's losses
                if k in last:
                    rows.append(("pretrain", f"final {k}", last[k]))
    results = _results(run_dir)
    intrinsic = results.get("intrinsic", {})
    if intrinsic:
        rows.append(("evaluate", "held-out mlm accuracy", intrinsic["mlm_accuracy"]))
        rows.append(("evaluate", "  unigram baseline (no context)", intrinsic["unigram_mlm_accuracy"]))
        rows.append(("evaluate", "held-out mlm loss", intrinsic["mlm_loss"]))
        rows.append(("evaluate", "  unigram baseline (no context)", intrinsic["unigram_mlm_loss"]))
        if intrinsic.get("nsp_accuracy") is not None:  # models without a sentence-pair head have none
            from evaluation.results import nsp_one_label_note

            note = nsp_one_label_note(intrinsic)  # a split of IsNext pairs only: said beside the number
            value = f"{fmt(intrinsic['nsp_accuracy'])} ({note})" if note else intrinsic["nsp_accuracy"]
            rows.append(("evaluate", "held-out nsp accuracy", value))
    head = (results.get("objective") or {}).get("headline") or {}
    if head:  # the member's own held-out metric (MLM / SBO / RTD / PLM / CLM) against its no-context baseline
        objective = results["objective"]["objective"]
        rows.append(("evaluate", f"held-out {objective} {head['metric']}", head["value"]))
        rows.append(("evaluate", f"  {head['baseline_name']}", head["baseline"]))
        accuracy = results["objective"].get(head["metric"].removesuffix("_loss") + "_acc")
        if head["metric"].endswith("_loss") and accuracy is not None:  # e.g. mlm_acc: the share of masked tokens right
            rows.append(("evaluate", f"held-out {objective} {head['metric'].removesuffix('_loss')} accuracy", accuracy))
        if "perplexity" in head:
            rows.append(("evaluate", f"held-out {objective} perplexity", head["perplexity"]))
            rows.append(("evaluate", f"  {head['baseline_name']}", head["baseline_perplexity"]))
    for task, per in results.get("tasks", {}).items():
        primary = per["primary_metric"]
        for model in ("pretrained", "random_init", "tfidf_logreg", "majority"):
            scores = per.get(model)
            if isinstance(scores, dict) and primary in scores:
                std = scores.get(f"{primary}_std")
                value = f"{scores[primary]:.4f} ± {std:.4f}" if std else scores[primary]
                rows.append(("evaluate", f"{task} {primary} · {model}", value))
            elif isinstance(scores, dict) and model in ("pretrained", "random_init"):  # a fine-tuned model scored, but
                # its primary metric is undefined on this test set (a correlation of one example or of constant gold):
                # said, where the table once read "(nothing in RUN yet)"
                from evaluation.scoring import METRICS

                others = [f"{m} {scores[m]:.4f}" for m in METRICS.get(per["task_type"], ()) if m in scores]
                rows.append(("evaluate", f"{task} {primary} · {model}",
                             "undefined on this test set" + (f" ({', '.join(others)})" if others else "")))
        for label, scores in (per.get("compared") or {}).items():
            if primary in scores:
                std = scores.get(f"{primary}_std")
                value = f"{scores[primary]:.4f} ± {std:.4f}" if std else scores[primary]
                rows.append(("evaluate", f"{task} {primary} · checkpoint {label}", value))
        cmp = per.get("comparison")
        if cmp and cmp.get("difference") is not None:
            p_value = f" (McNemar p = {cmp['mcnemar_p_value']:.2g})" if cmp.get("mcnemar_p_value") is not None else ""
            rows.append(("evaluate", f"{task} pretrained − random_init", f"{cmp['difference']:+.4f} {primary}{p_value}"))
        mdd = per.get("mdd")
        if mdd:  # below these, a difference on this test set is not evidence either way (evaluation/mdd.py)
            parts = [f"vs majority {_points(mdd.get('vs_majority'))}"]
            if mdd.get("discordant_fraction") is not None:  # a null difference is left out of the file
                parts.append(f"paired {_points(mdd.get('paired'))} (discordant {mdd['discordant_fraction']:.0%})")
            rows.append(("evaluate", f"{task} detectable accuracy diff. (n {mdd['test_examples']}, α .05, power .8)",
                         ", ".join(parts)))
    return rows


def _points(difference: float | None) -> str:
    return "none at this size" if difference is None else f"{difference * 100:.1f} points"


def summary_table(run_dir: Path) -> str:
    rows = summary_rows(run_dir)
    if not rows:
        return f"(nothing in {run_dir} yet)"
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    out = [f"{'stage':<{w1}}  {'':<{w2}}  value", f"{'-' * w1}  {'-' * w2}  {'-' * 12}"]
    out += [f"{a:<{w1}}  {b:<{w2}}  {fmt(c)}" for a, b, c in rows]
    return "\n".join(out)
