"""Measure every member's tiny twin on the real corpus and write the measured column of docs/family.md.

Each twin runs as a user runs it, `bertfactory run configs/<twin> --run-dir RUNS/<member>` (Prefect, the whole
recipe: preprocess, every pretraining step, evaluate), with the fine-tuning tasks left out (they are the demo's
and issue 18's business); its evaluate stage scores the member's own objective on the held-out shards against the
no-context baseline (evaluation/heldout.py). The table between the `family-measured` markers of docs/family.md is
rewritten from the runs' results.json and summary.json, with the commit and date, so it is never typed by hand.

    python scripts/family_table.py                       # every member, runs/family/, ~1 h on 2 cores
    python scripts/family_table.py --max-steps 400 --jobs 2   # a shorter budget for every twin
    python scripts/family_table.py --members roberta xlnet --jobs 2
    python scripts/family_table.py --write-only          # rebuild the table from existing runs
    python scripts/family_table.py --check               # every member has a row with every cell filled

Twins already complete in RUNS are not retrained (the flow's stage cache): delete RUNS/<member> to measure anew.
`--check` (tests/test_family_table.py runs it on the committed docs/family.md) fails, one line per problem, when a
member has no row, a row's cells differ from STATIC below (the table was edited by hand), or a cell says nothing:
blank, a lone dash, n/a, "not measured", a failed measurement. A dash with its reason ("— (transformers 5 has no
Transformer-XL)") or beside a filled half ("— / BertForMaskedLM") is filled: it says what there is.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "family.md"
START, END = "<!-- family-measured:start -->", "<!-- family-measured:end -->"

TWINS = {  # member -> tiny twin
    "BERT": "local.yaml",
    "RoBERTa": "tiny-roberta.yaml",
    "ALBERT": "tiny-albert.yaml",
    "SpanBERT": "tiny-spanbert.yaml",
    "ELECTRA": "tiny-electra.yaml",
    "XLNet": "tiny-xlnet.yaml",
    "Transformer-XL": "tiny-transformer-xl.yaml",
    "XLM": "tiny-xlm.yaml",
    "mBERT": "tiny-mbert.yaml",
    "ModernBERT": "tiny-modernbert.yaml",
}
DDP = "tests/training/test_objectives_distributed.py"
FLOW = "tests/flows/test_members_{}.py"
# The columns a test or the recipe files establish (member -> cells): objective, recipes, the paper's data setup
# as the full recipe uses it, DDP (2 gloo processes x B = 1 x 2B, DDP resume), FSDP, flow + torchrun test, HF.
STATIC = {
    "BERT": ("`mlm_nsp`", "bert-base, bert-large / local",
             "WordPiece 30k uncased; nsp-pairs (short 0.1); token masks 80/10/10, 10 static variants; AdamW 1e-4, "
             "batch 256, 1M steps", "✓ `[mlm_nsp]`", "✓ `[mlm_nsp]`", "✓ absolute[bert], test_pipeline",
             "BertModel / BertForPreTraining / BertForMaskedLM ↔ BertForPreTraining"),
    "RoBERTa": ("`mlm`", "roberta-base (+ DOC-SENTENCES `--set`) / tiny-roberta",
                "byte-level BPE 50k cased; FULL-SENTENCES 512; dynamic masking (K static as an option); no NSP; "
                "Adam β2 0.98 ε 1e-6, lr 6e-4, 8k sequences by accumulation", "✓ `[mlm]`", "✓ `[mlm]`",
                "✓ absolute[roberta]", "RobertaForMaskedLM / RobertaModel ↔ RobertaForMaskedLM"),
    "ALBERT": ("`mlm_sop`", "albert-base, albert-large / tiny-albert",
               "SentencePiece-style Unigram 30k; sop-pairs 512; n-gram masks (n ≤ 3); LAMB lr 0.00176 at batch 4096; "
               "E = 128, all layers shared, no dropout", "✓ `[mlm_sop]`", "✓ `[mlm_sop]`", "✓ absolute[albert]",
               "AlbertForPreTraining / ForMaskedLM / Model (exact GELU) ↔ AlbertForPreTraining"),
    "SpanBERT": ("`mlm_sbo`", "spanbert-base / tiny-spanbert",
                 "cased WordPiece 29k; single segments 512; span masks (geometric 0.2, ≤ 10 words) with the span "
                 "bounds in the shards, dynamic; MLM + SBO, no NSP; Adam 1e-4, batch 256", "✓ `[mlm_sbo]`",
                 "✓ `[mlm_sbo]`", "✓ absolute[spanbert]", "— / BertForMaskedLM (SBO head left out)"),
    "ELECTRA": ("`electra`", "electra-small / tiny-electra (two-stage: `model.electra.two_stage`)",
                "WordPiece 30k uncased; contiguous pairs (no NSP); token masks 15 % (85 % [MASK]); generator 1/4, "
                "λ 50; AdamW 5e-4, batch 128", "✓ `[electra]`, `[electra_two_stage]`",
                "✓ joint; two-stage refused (the generator's own embeddings stay sharded)", "✓ absolute[electra]",
                "ElectraForPreTraining + generator/ElectraForMaskedLM ↔ the same pair"),
    "XLNet": ("`plm`", "xlnet-base / tiny-xlnet",
              "Unigram 32k cased; clm document streams 512, memory 384 carried across batches; K = 6; relative "
              "positions and segments; Adam 1e-4, batch 256 (the paper's BERT-comparable Base)", "✓ `[plm]`",
              "✓ `[plm]`", "✓ other[xlnet]", "XLNetLMHeadModel / XLNetModel ↔ XLNetLMHeadModel"),
    "Transformer-XL": ("`txl_clm`", "transformer-xl / tiny-transformer-xl",
                       "clm document streams of 150, memory 150 carried across batches (the LM iterator's slots); "
                       "full softmax instead of adaptive; lr 2.5e-4, batch 60, clip 0.25", "✓ `[txl_clm]`",
                       "✓ `[txl_clm]`", "✓ other[transformer-xl]", "— (transformers 5 has no Transformer-XL)"),
    "XLM": ("`xlm_mlm_tlm` (tiny: `xlm_mlm`)", "xlm-base / tiny-xlm (+ tiny-xlm-tlm for the pair set)",
            "BPE 95k lowercased, α 0.5; doc-sentences 256 with a language per row, α-sampled; dynamic masks; MLM "
            "and TLM alternating per step; Adam 1e-4, batch 64", "✓ `[xlm_mlm]`, `[clm]`, `[tlm]`",
            "✓ `[xlm_mlm]`, `[clm]`, `[tlm]`", "✓ other[xlm] (MLM half)", "XLMModel ↔ XLMModel (encoder only)"),
    "mBERT": ("`mlm_nsp`", "mbert-base / tiny-mbert",
              "cased WordPiece 119,547 over many languages, α 0.7 for data and vocabulary; nsp-pairs; no language "
              "embedding; BERT-base's schedule", "✓ (BERT's objective)", "✓ (BERT's objective)", "✓ other[mbert]",
              "as BERT"),
    "ModernBERT": ("`modernbert_mlm`", "modernbert-base → modernbert-base-long / tiny-modernbert → "
                   "tiny-modernbert-long (phase 2: length extension)",
                   "byte-level BPE 50,368 cased; FULL-SENTENCES 1,024, unpadded; dynamic token masks 30 %; no NSP; "
                   "rotary θ 160k global / 10k local, global attention every 3rd layer, 128-token window elsewhere; "
                   "AdamW β2 0.98, lr 8e-4, wd 1e-5, batch 4,608 after a batch ramp (768 → 4,608 over 10k steps); "
                   "warmup-stable-decay (1-sqrt decay over the last 10 %); then the context extension to 8,192 from "
                   "phase 1's weights (lr 3e-4, 1-sqrt decay over the last 17 %)", "✓ `[modernbert_mlm]`",
                   "✓ `[modernbert_mlm]`", "✓ other[modernbert]",
                   "ModernBertForMaskedLM / ModernBertModel ↔ ModernBertForMaskedLM"),
}
COLUMNS = ("member", "objective", "recipe (full / tiny)", "paper's data setup (full recipe)", "DDP 2 procs", "FSDP",
           "flow + torchrun test", "HF import / export",
           "held-out objective vs no-context baseline (tiny twin, real corpus)")
# what an empty cell says (compared lower-cased, per " / " half): nothing
PLACEHOLDERS = frozenset({"", "-", "—", "–", "n/a", "na", "?", "tbd", "todo", "not measured"})
NO_TASKS = ["evaluate.tasks={}", "evaluate.feature_based.enabled=false", "evaluate.random_init_baseline=false"]


def run_twin(member: str, runs: Path, max_steps: int | None) -> tuple[str, str | None]:
    run_dir = runs / member.lower()
    sets = NO_TASKS + ([f"pretrain.max_steps={max_steps}"] if max_steps else [])
    cmd = [str(Path(sys.executable).parent / "bertfactory"), "run", str(REPO / "configs" / TWINS[member]),
           "--run-dir", str(run_dir)] + [a for s in sets for a in ("--set", s)]
    log = runs / f"{member.lower()}.log"
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                              env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    if proc.returncode:
        tail = log.read_text().strip().splitlines()[-1:] or ["(no output)"]
        return member, f"exit {proc.returncode}: {tail[0][:200]} (log {log})"
    return member, None


def measured(member: str, runs: Path, error: str | None) -> str:
    """The held-out cell: the member's objective on held-out shards vs the no-context baseline, and the budget."""
    run_dir = runs / member.lower()
    if error:
        return f"failed: {error}"
    if not (run_dir / "eval" / "results.json").is_file():
        return "not measured"
    summary = json.loads((run_dir / "pretrain" / "summary.json").read_text())
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    head = results["objective"]["headline"]
    cell = f"{head['metric']} **{head['value']:.3f}** vs {head['baseline']:.3f}"
    if "perplexity" in head:
        cell += f" (perplexity {head['perplexity']:.0f} vs {head['baseline_perplexity']:.0f})"
    scores = results["objective"]
    accs = [f"{k} {v:.3f}" + (f" (majority {scores[k[:-4] + '_baseline_acc']:.3f})"
                              if k[:-4] + "_baseline_acc" in scores else "")
            for k, v in sorted(scores.items()) if k.endswith("_acc") and not k.endswith("_baseline_acc")]
    return cell + (f"; {', '.join(accs)}" if accs else "") + \
        f"; {summary['steps']} steps, {summary['seconds'] / 60:.1f} min"


def render_table(runs: Path, errors: dict[str, str | None]) -> list[str]:
    """The lines between (and including) the markers: the provenance paragraph and the table."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    # `errors` holds the twins run by this invocation; the other rows are read from earlier runs, so the commit
    # named must not be claimed for them
    fresh = [member for member in TWINS if member in errors]
    if len(fresh) == len(TWINS):
        provenance = f"at commit {commit} (the runs: this code path) on {datetime.now(timezone.utc):%Y-%m-%d}"
    else:
        provenance = (f"at commit {commit} on {datetime.now(timezone.utc):%Y-%m-%d}, which ran "
                      f"{', '.join(fresh) or 'no twin'}; the other rows are read from their earlier runs under "
                      f"{runs.relative_to(REPO) if runs.is_relative_to(REPO) else runs} (measured at the commit "
                      "that last changed their row)")
    lines = [START, "",
             f"Written by `python scripts/family_table.py` {provenance} (2-core CPU): the last column is each tiny "
             "twin's recipe on "
             "the real samples, trained for the steps its cell names (`--max-steps` shortens the recipe's budget), "
             "scored on its held-out shards by its own objective against the best no-context predictor "
             "(evaluation/heldout.py: the train split's unigram distribution). DDP / FSDP cells name the "
             f"case of `{DDP}`; flow cells the case of `tests/flows/test_members_absolute.py` / `_other.py`; HF cells "
             "are tested in tests/training/test_hf*.py (logits within 1e-5 of transformers' classes built offline).",
             "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for member in TWINS:
        cells = (member, *STATIC[member], measured(member, runs, errors.get(member)))
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", END]


def write_table(runs: Path, errors: dict[str, str | None]) -> None:
    lines = render_table(runs, errors)
    text = DOC.read_text(encoding="utf-8")
    if START in text:
        before, rest = text.split(START, 1)
        after = rest.split(END, 1)[1]
        text = before + "\n".join(lines) + after
    else:
        text = text.rstrip("\n") + "\n\n## Measured: tiny twins on the real corpus\n\n" + "\n".join(lines) + "\n"
    DOC.write_text(text, encoding="utf-8")
    print("\n".join(lines))


def table_rows(text: str) -> dict[str, list[str]]:
    """member -> its cells, from the table between the markers of a family.md text."""
    if START not in text or END not in text:
        raise ValueError(f"{DOC.name}: no table between {START} and {END}")
    block = text.split(START, 1)[1].split(END, 1)[0]
    rows = {}
    for line in block.splitlines():
        if not line.startswith("|") or line.startswith("|---") or line.startswith("| member |"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        rows[cells[0]] = cells
    return rows


def empty_cell(cell: str) -> bool:
    """A cell that says nothing (the module docstring): every " / " half a placeholder, or a failed run."""
    return cell.lower().startswith("failed:") or all(half.strip().lower() in PLACEHOLDERS for half in cell.split(" / "))


def table_problems(text: str) -> list[str]:
    """One line per problem of the family table in `text` (see the module docstring); [] = every cell filled."""
    rows = table_rows(text)
    problems = [f"{DOC.name}: no row for {member}" for member in TWINS if member not in rows]
    for member, cells in rows.items():
        if len(cells) != len(COLUMNS):
            problems.append(f"{DOC.name}: {member}'s row has {len(cells)} cells, the table {len(COLUMNS)}")
            continue
        problems += [f"{DOC.name}: {member}'s '{column}' cell is empty ({cell!r})"
                     for column, cell in zip(COLUMNS, cells) if empty_cell(cell)]
        if member not in STATIC:
            problems.append(f"{DOC.name}: {member} is not a member of scripts/family_table.py (TWINS / STATIC)")
        elif tuple(cells[1:-1]) != STATIC[member]:
            problems.append(f"{DOC.name}: {member}'s row differs from STATIC in scripts/family_table.py; rewrite "
                            "the table with --write-only")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", nargs="*", choices=list(TWINS), default=list(TWINS))
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "family", help="where the twins' runs go")
    parser.add_argument("--jobs", type=int, default=1, help="twins trained at once (each one torch thread)")
    parser.add_argument("--write-only", action="store_true", help="only rebuild the table from existing runs")
    parser.add_argument("--check", action="store_true", help="only check docs/family.md's table: a row per member, "
                        "every cell filled, the rows as STATIC says (exit 1 with a line per problem)")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="train each twin this many steps instead of its recipe's (the table says how many)")
    args = parser.parse_args()
    if args.check:
        problems = table_problems(DOC.read_text(encoding="utf-8"))
        print("\n".join(problems) or f"{DOC.relative_to(REPO)}: {len(TWINS)} members, every cell filled")
        sys.exit(1 if problems else 0)
    args.runs.mkdir(parents=True, exist_ok=True)
    errors: dict[str, str | None] = {}
    if not args.write_only:
        with ThreadPoolExecutor(args.jobs) as pool:
            for member, error in pool.map(lambda m: run_twin(m, args.runs, args.max_steps), args.members):
                errors[member] = error
                print(f"{member}: {'ok' if error is None else error}", flush=True)
    write_table(args.runs, errors)


if __name__ == "__main__":
    main()
