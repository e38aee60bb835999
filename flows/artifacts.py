"""Prefect artifacts for each stage: corpus statistics, training summary, evaluation table (markdown/tables
in the Prefect UI), made from the files each stage wrote (not from its internals), and links to those files and to
the stage's TensorBoard event files (training/tracking.py; `tensorboard --logdir RUN/<stage dir>/tensorboard`)."""

from __future__ import annotations

from pathlib import Path

from training.tracking import TENSORBOARD_DIR

from .summary import fmt


def _md_table(rows: list[tuple[str, object]]) -> str:
    lines = ["| | |", "|---|---|"] + [f"| {k} | {fmt(v)} |" for k, v in rows]
    return "\n".join(lines)


def tensorboard_dir(stage: str, run_dir: Path) -> Path | None:
    """The stage's TensorBoard event directory when it wrote one (pretrain, evaluate, distill), else None."""
    stage_dir = {"pretrain": "pretrain", "evaluate": "eval", "distill": "distill"}.get(stage)
    path = Path(run_dir) / stage_dir / TENSORBOARD_DIR if stage_dir else None
    return path if path is not None and path.is_dir() and any(path.rglob("events.out.tfevents.*")) else None


def tensorboard_note(stage: str, run_dir: Path) -> str:
    """A markdown line saying how to watch the stage's curves in TensorBoard ('' without event files)."""
    path = tensorboard_dir(stage, run_dir)
    return f"\n\nTensorBoard: `tensorboard --logdir {path.resolve()}`" if path is not None else ""


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
    if stage in ("pretrain", "tapt"):
        s = result.get("summary", {})
        return head + _md_table([(k, v) for k, v in s.items() if not isinstance(v, (dict, list))]) + \
            tensorboard_note(stage, run_dir)
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
    return head + _md_table(rows) + f"\n\nReport: `{run_dir / 'eval/report.md'}`" + tensorboard_note(stage, run_dir)


def in_flow_run() -> bool:
    """Whether Prefect is running a flow here (artifacts have somewhere to go; --no-prefect runs have not)."""
    from prefect.context import FlowRunContext

    return FlowRunContext.get() is not None


# the files a stage leaves for people to read: linked from the flow run in the Prefect UI
REPORT_FILES = {"preprocess": ("shards/manifest.json", "shards/stats.json"),
                "pretrain": ("pretrain/loss_curve.png", "pretrain/summary.json"),
                "evaluate": ("eval/report.md", "eval/results.json", "eval/*.png"),
                "distill": ("distill/report.md", "distill/results.json")}


def report_links(stage: str, run_dir: Path) -> list[Path]:
    """The existing report and plot files of `stage` in `run_dir`, in a stable order, then its TensorBoard event
    directory (when it wrote one)."""
    files = [p for pattern in REPORT_FILES.get(stage, ()) for p in sorted(Path(run_dir).glob(pattern)) if p.is_file()]
    board = tensorboard_dir(stage, run_dir)
    return files + ([board] if board is not None else [])


def _artifact_key(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def publish_links(stage: str, run_dir: Path, paths: list[Path] | None = None) -> None:
    """A link artifact (file:// URL) per report or plot file of `stage` (default: report_links)."""
    from prefect.artifacts import create_link_artifact

    run_dir = Path(run_dir).resolve()
    for path in report_links(stage, run_dir) if paths is None else paths:
        path = Path(path).resolve()
        rel = path.relative_to(run_dir) if path.is_relative_to(run_dir) else path
        what = (f"TensorBoard event files (tensorboard --logdir {path})" if path.is_dir() else path.name)
        create_link_artifact(link=path.as_uri(), link_text=str(rel), key=_artifact_key(f"{stage}-{path.name}"),
                             description=f"bertfactory {stage}: {what} of {run_dir.name}")


def publish_stage_artifacts(stage: str, run_dir: Path, result: dict) -> None:
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(
        markdown=stage_markdown(stage, run_dir, result),
        key=f"{stage}-summary",
        description=f"bertfactory {stage} summary for {run_dir.name}",
    )
    publish_links(stage, run_dir)


def refresh_markdown(result: dict) -> str:
    head = f"### corpus_refresh — {result['status']}\n\n"
    if result["status"] == "nothing_new":
        return head + result.get("message", "nothing new") + (
            f"\n\nLatest corpus version: {result['version']} (`{result['corpus_dir']}`)" if result["version"] else "")
    counts = result.get("counts") or {}
    rows = [("corpus version", result["version"]), ("corpus directory", f"`{result['corpus_dir']}`"),
            ("new input files", len(result["new_inputs"])), ("documents read", counts.get("docs_read")),
            ("documents kept", counts.get("docs_kept"))]
    rows += [(f"duplicates of earlier documents: {k}", v) for k, v in sorted((counts.get("duplicates_removed") or {}).items())]
    rows += [("sentences", counts.get("sentences")), ("tokens", counts.get("tokens"))]
    if result.get("pretrain"):
        rows.append(("continued pretraining", f"`{result['pretrain']}`"))
    files = "\n".join(f"- `{p}`" for p in result["new_inputs"])
    return head + _md_table(rows) + "\n\nNew inputs read:\n" + files


def publish_refresh_artifacts(run_dir: Path, result: dict) -> None:
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(markdown=refresh_markdown(result), key="corpus-refresh",
                             description=f"bertfactory corpus refresh of {run_dir.name}")
    if result["status"] == "new_version":
        corpus = Path(result["corpus_dir"])
        publish_links("corpus-refresh", run_dir, [p for p in (corpus / "manifest.json", corpus / "stats.json") if p.is_file()])


def publish_distill_artifacts(run_dir: Path, result: dict) -> None:
    """The distillation report (teacher and students side by side) as markdown, and links to its files."""
    from prefect.artifacts import create_markdown_artifact

    report = Path(run_dir) / "distill" / "report.md"
    head = (f"### distill — {result['status']}\n\nRun directory: `{run_dir}` · key `{result['key'][:12]}` · "
            f"{result['seconds']} s\n\n")
    create_markdown_artifact(markdown=head + (report.read_text(encoding="utf-8") if report.is_file() else "") +
                             tensorboard_note("distill", Path(run_dir)),
                             key="distill-summary", description=f"bertfactory distill summary for {Path(run_dir).name}")
    publish_links("distill", Path(run_dir))
