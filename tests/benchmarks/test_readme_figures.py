"""Every benchmark figure README.md quotes is the current one in benchmarks/RESULTS.md.

FIGURES lists each quoted figure as (the README's words, the RESULTS.md section it comes from, the words of that
section that hold it). The test fails when either side changes alone: a new figure in RESULTS.md not carried into
the README, or a README figure edited without a measurement behind it. Where the README rounds (1.29× for 1.287x),
`rounded` says so and every number of the README's words must be the section's number rounded to the README's
digits, in order. Also checked: every section that README, docs, tests or benchmark scripts name in quotes after
"RESULTS.md" exists there, and the page's table of contents links its own headings. The demo excerpt's figures are
checked by tests/test_readme_demo.py, not here."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "RESULTS.md"
README = REPO / "README.md"

STEP = "Pretraining step on CPU"
ALBERT = "ALBERT step"
ELECTRA = "ELECTRA step"
GPU = "GPU step"
THROUGHPUT = "Preprocessing throughput vs HF datasets"
FULL_WORK = "Full work vs datatrove + HF datasets"
FIXED = "Fixed cost of a job"
MEMORY = "Memory at 1x / 10x / 100x"
SCALING = "The demo's scaling curve"
TRANSFER = "The demo's transfer targets"

# (README words, RESULTS.md section heading (its start), words of that section, rounded)
FIGURES: list[tuple[str, str, str | tuple[str, ...], bool]] = [
    ("**2.60×** the tokens/s of transformers' `BertForPreTraining`", STEP, "ratio ours / HF: 2.60x tokens/s", True),
    ("**1.30×** at BERT-base", STEP, "ratio ours / HF: 1.30x tokens/s", True),
    ("less peak memory (0.47× / 0.82×)", STEP, ("0.47x peak extra memory", "0.82x peak extra memory"), True),
    ("**2.82×** / 1.33× with `pretrain.fused_mlm_loss`", STEP,
     ("ratio ours-fused / HF: 2.82x tokens/s", "ratio ours-fused / HF: 1.33x tokens/s"), True),
    ("87 % of the machine's GEMM rate", STEP, "87 % of the 180 GFLOP/s one FFN-shaped GEMM reaches", False),
    ("ALBERT 1.88× (tiny)", ALBERT, "ratio ours / HF: 1.88x tokens/s", True),
    ("1.35× (ALBERT-base)", ALBERT, "ratio ours / HF: 1.35x tokens/s", True),
    ("ELECTRA 1.98× (tiny)", ELECTRA, "ratio ours / HF: 1.98x tokens/s", True),
    ("1.47× (ELECTRA-Small)", ELECTRA, "ratio ours / HF: 1.47x tokens/s", True),
    ("measured at 5441eb8 on a quiet 2-core machine", THROUGHPUT, "Measured at 5441eb8", False),
    ("`python benchmarks/corpus_throughput.py all --repeats 2`", THROUGHPUT,
     "python benchmarks/corpus_throughput.py all --repeats 2 --large 10", False),
    ("**1.29×** the HF datasets `map` + `group_texts` path", THROUGHPUT, "| **1.287x** |", True),
    ("(1.9 vs 2.5 s)", THROUGHPUT, ("| **1.9 (1.9, 1.9)** | **1.287x**", "| 2.5 (2.5, 2.5) | 1.000x"), False),
    ("**1.48×** at 10×", THROUGHPUT, ("| **1.484x** |", "10x wall s"), True),
    ("(14.5 vs 21.5 s, 0.35 vs 5.1 GB peak)", THROUGHPUT,
     ("**14.5 (14.4, 14.6)**", "21.5 (21.9, 21.2)", "ours in process 349 MiB", "hf 5,134"), False),
    ("level with a bare `encode_batch` there (0.98×)", THROUGHPUT, "| 10x: default runner / encode_batch | 0.981x |",
     False),
    ("it is **3.7×** faster than datatrove's filters and MinHash dedup", FULL_WORK, "**3.74x** (rounds 3.87, 3.62)",
     False),
    ("A 3-document job costs 1.9 s beyond Python start-up", FIXED, "a 3-document job costs **1.93 s wall", False),
    ("100× the sample (216 M tokens, 10.5 M instances with 4 mask variants)", MEMORY,
     "100x sotu (216 M text tokens, 10.5 M instances x 4 mask variants)", True),
    ("preprocesses in 7.6 minutes with the whole process tree at 1.6 GB", MEMORY,
     "in 7.6 minutes with the whole process tree at 1.63 GB", True),
    ("`corpus_throughput.py rss --copies 100 --trace", MEMORY,
     "python benchmarks/corpus_throughput.py rss --copies 100 --work /tmp/s12/rss100b --trace", False),
    ("43 passed, 2 skipped (the 2-GPU tests)", GPU, "`make test-gpu`: **43 passed, 2 skipped** (the two 2-GPU tests",
     False),
    ("On one H200 in bf16, the compiled step", GPU, "on one NVIDIA H200, ours compiled", False),
    ("**1.78×** transformers' tokens/s at BERT-base's batch of 256 × 128 (34.9 % MFU)", GPU,
     ("reaches **34.9 % MFU** at BERT-base's recipe batch of 256 x 128 tokens (**1.78x** transformers' tokens/s",),
     False),
    ("**1.85×** for ModernBERT-base at 24 × 1,024 (24.3 % MFU, on the padded path", GPU,
     "**24.3 %** for ModernBERT-base at 24 x 1,024 (**1.85x**)", False),
    ("goals of 45 % and 40 % MFU are not met", GPU, "The issue's MFU goals (45 %, 35 %, 40 %) are **not met**", False),
    ("97 Wikipedia articles (3.3 M tokens", SCALING, ("(the 97 enwiki articles", "3.30 M train tokens"), True),
    ("scaling curve of this recipe to 135 CPU-minutes", SCALING, "Up to 135 CPU-minutes, then, the curve", True),
    ("trec_coarse gains significantly from 15 CPU-minutes on (+7 to +12 points over random init, p <= .001", SCALING,
     "only trec_coarse, from 15 CPU-minutes on (+6.9 to +12.0 points, p <= 0.001", True),
    ("past TF-IDF at 45)", SCALING, "**Pretraining overtakes TF-IDF** on trec_coarse at 45 CPU-minutes", True),
    ("the whole train split x 10 epochs; at 800 x 3 every model sat at F1 ~0", TRANSFER,
     ("The whole split x 10 epochs is the budget at which fine-tuning learns the tagging at all",
      "| 800 x 3, [3e-4, 1e-3] (old) | pretrained (demo) | 3e-4 | 0.000 | 0.000 (0 / 0)"), False),
]

NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?|\.\d+")
HEADING = re.compile(r"^(#{1,6}) (.+)$")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _headings(markdown: str) -> list[tuple[int, str, int]]:
    """(level, title, line index) of every heading outside fenced code."""
    found, fenced = [], False
    for index, line in enumerate(markdown.splitlines()):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append((len(match.group(1)), match.group(2).strip(), index))
    return found


def _section(markdown: str, start: str) -> str:
    """The level-2 section whose heading starts with `start`, up to the next level-1 or level-2 heading."""
    lines, headings = markdown.splitlines(), _headings(markdown)
    matches = [i for i, (level, title, _) in enumerate(headings) if level == 2 and title.startswith(start)]
    assert len(matches) == 1, f"benchmarks/RESULTS.md has {len(matches)} sections whose heading starts with {start!r}"
    first = headings[matches[0]][2]
    end = next((line for level, _, line in headings[matches[0] + 1:] if level <= 2), len(lines))
    return "\n".join(lines[first:end])


def _numbers(text: str) -> list[str]:
    return [n.replace(",", "") for n in NUMBER.findall(text)]


def _rounds_to(exact: str, shown: str) -> bool:
    digits = len(shown.split(".")[1]) if "." in shown else 0
    quantum = Decimal(1).scaleb(-digits)
    return Decimal(exact).quantize(quantum, rounding=ROUND_HALF_UP) == Decimal(shown)


@pytest.mark.parametrize("readme_words, heading, results_words, rounded", FIGURES,
                         ids=[f"{heading}: {words[:40]}" for words, heading, _, _ in FIGURES])
def test_each_readme_figure_is_the_current_one_in_its_results_section(readme_words, heading, results_words, rounded):
    readme = _flat(README.read_text(encoding="utf-8"))
    section = _flat(_section(RESULTS.read_text(encoding="utf-8"), heading))
    wanted = (results_words,) if isinstance(results_words, str) else results_words
    assert readme_words in readme, f"README.md no longer quotes {readme_words!r}: update FIGURES with it"
    missing = [words for words in wanted if words not in section]
    assert not missing, (f"benchmarks/RESULTS.md section {heading!r} no longer holds {missing}, which README.md quotes "
                         f"as {readme_words!r}: update the README's figure (and FIGURES) or the measurement")
    if rounded:
        shown = _numbers(readme_words)
        exact = [n for words in wanted for n in _numbers(words)]
        assert len(shown) == len(exact), (shown, exact)
        wrong = [(s, e) for s, e in zip(shown, exact) if not _rounds_to(e, s)]
        assert not wrong, f"README.md shows {readme_words!r}, but RESULTS.md measured {exact}: {wrong}"


def test_fixture_checks_every_benchmark_figure_in_the_readme_performance_section():
    """The Performance section's numbers are all covered by FIGURES (a new figure there needs an entry)."""
    readme = README.read_text(encoding="utf-8")
    performance = _flat(readme.split("## Performance", 1)[1].split("\n## ", 1)[0])
    covered = " ".join(words for words, _, _, _ in FIGURES)
    uncovered = [n for n in NUMBER.findall(performance) if n not in covered]
    assert not uncovered, f"README.md's Performance section quotes {uncovered} with no entry in FIGURES"


QUOTED = re.compile(r'RESULTS\.md(?:,\s*|\s+\(?|\s*\()((?:"[^"]+"(?:\s*,\s*|\s*;\s*|\s+and\s+)?)+)')


def _quoted_sections() -> list[tuple[str, str]]:
    files = [README, REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").glob("*.md")),
             *sorted((REPO / "benchmarks").glob("*.py")), *sorted((REPO / "tests").rglob("*.py"))]
    found = []
    for path in files:
        text = _flat(path.read_text(encoding="utf-8"))
        for group in QUOTED.findall(text):
            found += [(str(path.relative_to(REPO)), name) for name in re.findall(r'"([^"]+)"', group)]
    return found


def test_every_section_named_after_results_md_exists():
    titles = [_flat(title) for _, title, _ in _headings(RESULTS.read_text(encoding="utf-8"))]
    quoted = _quoted_sections()
    assert len(quoted) >= 10  # README, docs and scripts name sections; the pattern still finds them
    missing = [(path, name) for path, name in quoted if not any(title.startswith(name) for title in titles)]
    assert not missing, f"these name a RESULTS.md section that does not exist (renamed?): {missing}"


def _slug(title: str) -> str:
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_table_of_contents_links_the_page_s_sections():
    markdown = RESULTS.read_text(encoding="utf-8")
    sections = {_slug(title) for level, title, _ in _headings(markdown) if level == 2 and title != "Contents"}
    contents = markdown.split("## Contents", 1)[1].split("\n# ", 1)[0]
    linked = set(re.findall(r"\]\(#([^)]+)\)", contents))
    assert linked == sections, (sorted(sections - linked), sorted(linked - sections))
    assert "HISTORY.md" in markdown.split("## Contents", 1)[0]
