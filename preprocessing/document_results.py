"""What the documents pipeline leaves in the staging work directory, summed on the driver: the outcome counts
(per reason, per source file), the tally of the kept documents (DocTally; TallyDocs is the same tally as a Beam
CombineFn inside the single job), quarantine.jsonl and duplicates.jsonl, the merged dedup index, and the one error
for a corpus left without training documents.

    python -c "from preprocessing.document_results import DocTally; t = DocTally(); print(t.counts())"
"""

from __future__ import annotations

import glob
import json
from collections import Counter
from pathlib import Path

import apache_beam as beam

from bertfactory.errors import InputError
from bertfactory.io import atomic_write_text

from .bad_inputs import bad_input_entries
from .config import CorpusConfig
from .shards import SPLITS, ShardInfo
from .staging import Staging, iter_docs, read_lines

QUARANTINE_FILE = "quarantine.jsonl"
DUPLICATES_FILE = "duplicates.jsonl"


def _rule_text(rule: str) -> str:
    """A rule key of counts.docs_dropped_rules as the error says it: `corpus.filters.min_words=50` ->
    `fewer words than corpus.filters.min_words=50`."""
    say = {"min_doc_chars": "fewer characters than", "min_doc_sentences": "fewer sentences than",
           "min_chars": "fewer characters than", "min_words": "fewer words than", "max_chars": "more characters than",
           "max_words": "more words than"}
    setting = rule.split("=", 1)[0].rsplit(".", 1)[-1]
    if setting in say:
        source = ", Gopher" if setting in ("min_words", "max_words") else ""
        return f"{say[setting]} {rule}{source}"
    return rule


def empty_corpus_error(files: list[str], corpus: CorpusConfig, counts: dict) -> InputError:
    why = {
        "namespace": f"namespace not in {corpus.namespaces}",
        "redirect": "redirect page",
        "empty": "no text left after removing markup",
    }
    rules = counts.get("docs_dropped_rules") or {}
    lines = [f"no training documents left after filtering {', '.join(files)}: {counts['docs_read']} records read, "
             f"{counts['docs_kept']} kept ({counts['docs'].get('heldout', 0)} of them held out)"]
    for reason, n in counts["docs_dropped"].items():
        if reason in rules:  # a reason more than one setting can cause: the settings that applied, each counted
            applied = "; ".join(_rule_text(rule) + (f": {k}" if len(rules[reason]) > 1 else "")
                                for rule, k in rules[reason].items())
            lines.append(f"  dropped {reason} ({applied}): {n}")
        else:
            lines.append(f"  dropped {reason} ({why.get(reason, reason)}): {n}")
    lines += [f"  quarantined {reason}: {n}" for reason, n in counts["quarantined"].items()]
    lines += [f"  duplicates removed ({kind}): {n}" for kind, n in counts["duplicates_removed"].items() if n]
    counted = sorted(((k, rule) for per in rules.values() for rule, k in per.items()
                      if rule.startswith("corpus.") and "[" not in rule), reverse=True)
    if counted:  # the one that dropped the most first
        setting, value = counted[0][1].split("=", 1)
        bound = "below" if ".min_" in setting else "above"
        lines.append(f"  for a small or unusual input, relax the rule that dropped the most: --set {setting}=N with N "
                     f"{bound} {value} (null switches a corpus.filters rule off; docs/cleaning.md)")
    return InputError("\n".join(lines))


def outcome_counts(outcomes: Counter) -> dict:
    """{"read": n, "kept": n, "docs_dropped": {reason: n}, "quarantined": {reason: n}, "duplicates": {kind: n}}"""
    def by(prefix: str) -> dict:
        return {k.split(":", 1)[1]: v for k, v in sorted(outcomes.items()) if k.startswith(prefix + ":")}

    return {"docs_read": outcomes.get("read", 0), "docs_dropped": by("dropped"), "quarantined": by("quarantined"),
            "duplicates_removed": by("duplicate")}


def drop_rules(outcomes: Counter) -> dict:
    """{reason: {rule: n}}: the settings that dropped documents, for the reasons more than one setting can cause
    (outcomes `rule:<reason>:<rule>`, filters.DropReason)."""
    rules: dict[str, dict[str, int]] = {}
    for key, n in sorted(outcomes.items()):
        if key.startswith("rule:"):
            reason, rule = key[len("rule:"):].split(":", 1)
            rules.setdefault(reason, {})[rule] = n
    return rules


def tally_entry(doc: dict) -> tuple:
    """What DocTally counts of one kept document record: (split, source, language ("src-tgt" for a pair), is a
    pair, sentences, characters); small enough to travel with the document's stub (documents.SpillDocs) where
    the record itself stays in its spill file."""
    if doc.get("kind") == "pair":
        return doc["split"], doc["source"], f"{doc['src_lang']}-{doc['tgt_lang']}", True, 0, 0
    return (doc["split"], doc["source"], doc.get("lang") or "und", False,
            sum(len(p) for p in doc["paragraphs"]), sum(len(s) for p in doc["paragraphs"] for s in p))


class DocTally:
    """What the kept document records say in sum: documents per split, per language (and split), training
    characters per language, sentences, pairs, documents per source. The driver tallies the docs files with it;
    inside a single job (TallyDocs) it gives the instance plan the same figures before any document is tokenised."""

    def __init__(self) -> None:
        self.split_docs: Counter = Counter()
        self.lang_docs: dict[str, Counter] = {}
        self.lang_chars: Counter = Counter()
        self.kept_by_source: Counter = Counter()
        self.sentences = self.pairs = 0

    def add(self, doc: dict) -> None:
        self.add_entry(tally_entry(doc))

    def add_entry(self, entry: tuple) -> None:
        """One kept document's tally_entry."""
        split, source, lang, pair, sentences, chars = entry
        self.split_docs[split] += 1
        self.kept_by_source[source] += 1
        if pair:
            self.pairs += 1
        else:
            self.sentences += sentences
            if split == "train":
                self.lang_chars[lang] += chars
        self.lang_docs.setdefault(lang, Counter())[split] += 1

    def merge(self, other: "DocTally") -> "DocTally":
        self.split_docs += other.split_docs
        for lang, c in other.lang_docs.items():
            self.lang_docs.setdefault(lang, Counter()).update(c)
        self.lang_chars += other.lang_chars
        self.kept_by_source += other.kept_by_source
        self.sentences += other.sentences
        self.pairs += other.pairs
        return self

    def counts(self) -> dict:
        """The manifest's `docs` and `languages` counts (what instance_plan reads)."""
        return {
            "docs": {s: self.split_docs[s] for s in SPLITS},
            "languages": {lang: {"docs": sum(c.values()), "train_docs": c["train"],
                                 **({"train_chars": self.lang_chars[lang]} if lang in self.lang_chars else {})}
                          for lang, c in sorted(self.lang_docs.items())},
        }


class TallyDocs(beam.CombineFn):
    """Kept documents' (doc_id, stub) (documents.SpillDocs: each carries its tally_entry) -> DocTally.counts()
    over all of them, without reading their text."""

    def create_accumulator(self) -> DocTally:
        return DocTally()

    def add_input(self, tally: DocTally, item: tuple) -> DocTally:
        tally.add_entry(item[1]["tally"])
        return tally

    def merge_accumulators(self, tallies) -> DocTally:
        merged = DocTally()
        for tally in tallies:
            merged.merge(tally)
        return merged

    def extract_output(self, tally: DocTally) -> dict:
        return tally.counts()


def document_counts(files: list[str], staging: Staging) -> dict:
    """The documents pipeline's outputs -> the document counts; quarantine.jsonl and duplicates.jsonl written."""
    total: Counter = Counter()
    per_source: dict[int, Counter] = {}
    for line in read_lines(str(staging.work / "outcomes" / "part*.jsonl")):
        (source, what), n = json.loads(line)
        total[what] += n
        per_source.setdefault(source, Counter())[what] += n
    tally = DocTally()
    for doc in iter_docs(staging.work):
        tally.add(doc)
    quarantine = sorted(read_lines(str(staging.work / "quarantine" / "part*.jsonl")))
    atomic_write_text(staging.shards / QUARANTINE_FILE, "".join(quarantine))
    duplicates = sorted(read_lines(str(staging.work / "duplicates" / "part*.jsonl")))
    atomic_write_text(staging.shards / DUPLICATES_FILE, "".join(duplicates))
    counts = outcome_counts(total)
    kept = sum(tally.split_docs.values())
    removed = sum(counts["duplicates_removed"].values())
    tallied = tally.counts()
    counts.update({
        "docs_kept": kept,
        "docs": tallied["docs"],
        "sentences": tally.sentences,
        "dedup_rate": round(removed / max(1, kept + removed), 6),
        "languages": tallied["languages"],
        "sources": [{"file": Path(f).name, **outcome_counts(per_source.get(i, Counter())),
                     "docs_kept": tally.kept_by_source[i]} for i, f in enumerate(files)],
    })
    if tally.pairs:
        counts["pairs"] = tally.pairs
    rules = drop_rules(total)
    if rules:  # which setting dropped the documents of a reason that several settings can cause
        counts["docs_dropped_rules"] = rules
    bad = bad_input_entries(quarantine)
    if bad:  # files that broke part way (preprocessing.bad_inputs); absent otherwise, so other manifests keep their bytes
        counts["bad_inputs"] = [{key: entry[key] for key in ("file", "reason", "ordinal", "detail")} for entry in bad]
    return counts


DEDUP_INDEX_FILE = "dedup_index.arrow"


def merge_dedup_entries(staging: Staging, parent_index: Path | None, cfg) -> ShardInfo:
    """Merge the kept documents' dedup entries (and the parent version's) into RUN/shards/dedup_index.arrow: the
    index the next corpus version deduplicates against."""
    from .dedup_index import merge_dedup_index

    parts = sorted(Path(p) for p in glob.glob(str(staging.work / "dedup_index" / "part-*.arrow")))
    info = merge_dedup_index(parts, parent_index, staging.shards / DEDUP_INDEX_FILE, cfg)
    return ShardInfo(path=DEDUP_INDEX_FILE, rows=info["rows"], sha256=info["sha256"])
