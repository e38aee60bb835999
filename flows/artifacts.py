"""Prefect artifacts for each stage: corpus statistics, training summary, evaluation table (markdown/tables
in the Prefect UI), made from the files each stage wrote (not from its internals)."""

from __future__ import annotations

from pathlib import Path

from .summary import fmt


def _md_table(rows: list[tuple[str, object]]) -> str:
    lines = ["| | |", "|---|---|"] + [f"| {k} | {fmt(v)} |" for k, v in rows]
    return "\n".join(lines)


def stage_markdown(stage: str, run_dir: Path, result: dict) -> str:
    status = result["status"]
    head = f"### {stage} — {status}\n\nRun directory: `{run_dir}` · key `{result['key'][:12]}` · {result['seconds']} s\n\n"
    if stage == "preprocess":
        from preprocessing.shards import read_manifest

        manifest = read_manifest(run_dir / "shards").model_dump(mode="json")
        c = manifest["counts"]
        rows = [("documents read", c.get("docs_read")), ("documents kept", c.get("docs_kept"))]
        rows += [(f"dropped: {k}", v) for k, v in sorted((c.get("docs_dropped") or {}).items())]
        rows += [(f"quarantined: {k}", v) for k, v in sorted((c.get("quarantined") or {}).items())]
        rows += [("sentences", c.get("sentences"))]
        rows += [(f"instances ({s})", info["rows"]) for s, info in manifest["splits"].items()]
        rows += [("tokens", c.get("tokens")), ("masked tokens", c.get("masked_tokens")),
                 ("vocab size", manifest["tokenizer"]["vocab_size"]), ("mask variants", manifest["masking"].get("variants"))]
        return head + _md_table(rows)
    if stage == "pretrain":
        s = result.get("summary", {})
        return head + _md_table([(k, v) for k, v in s.items() if not isinstance(v, (dict, list))])
    from evaluation.results import read_results

    results = read_results(run_dir / "eval")
    rows = [(f"intrinsic {k}", v) for k, v in results.get("intrinsic", {}).items() if not isinstance(v, (dict, list))]
    for task, per in results.get("tasks", {}).items():
        primary = per["primary_metric"]
        for model in ("pretrained", "random_init", "tfidf_logreg", "majority"):
            metrics = per.get(model)
            if isinstance(metrics, dict) and primary in metrics:
                rows.append((f"{task} · {model} {primary}", metrics[primary]))
                rows.append((f"{task} · {model} {primary} std", metrics.get(f"{primary}_std")))
        for label, metrics in (per.get("compared") or {}).items():
            rows.append((f"{task} · checkpoint {label} {primary}", metrics.get(primary)))
    for task, transfer in (results.get("crosslingual") or {}).items():
        for key, target in transfer["targets"].items():
            rows.append((f"{task} → {key} zero-shot · pretrained {transfer['primary_metric']}",
                         target["pretrained"].get(transfer["primary_metric"])))
    return head + _md_table(rows) + f"\n\nReport: `{run_dir / 'eval/report.md'}`"


def publish_stage_artifacts(stage: str, run_dir: Path, result: dict) -> None:
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(
        markdown=stage_markdown(stage, run_dir, result),
        key=f"{stage}-summary",
        description=f"bertfactory {stage} summary for {run_dir.name}",
    )
