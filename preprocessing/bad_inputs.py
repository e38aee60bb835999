"""Input files that broke part way through (a truncated download, a damaged bz2 block: sources.corrupt): how the
stage counts them and when it gives up.

One corrupt file must not sink a crawl of thousands, so the documents pipeline quarantines such a file instead of
ending the job (documents.ReadRecords): its quarantine record (quarantine.jsonl, record_id `<file>`) has the
reason (truncated_gzip, corrupt_gzip, bad_warc_framing, corrupt_bz2, truncated_bz2, broken_xml,
corrupt_compression), the ordinal = records read before the break, and the byte offset in the detail; the
manifest counts it under `quarantined[reason]` (and its unreadable rest as one record read, so docs_read = kept +
dropped + quarantined still holds) and lists it in `counts.bad_inputs` (present only when a file broke). The records read before the break are kept: each was read whole and passed its reader's checks, and they
stay counted under `docs_read` and the outcome they had (for a multistream dump the pages of the damaged chunk are
not read at all; the detail says how many).

The job fails after the documents pipeline when more files broke than `corpus.max_bad_inputs` allows: a whole
number is a count of files, a number in (0, 1) a fraction of the input files (default 0.01: 1 %, so a job of
fewer than 100 files tolerates none and reads as before, and a CC-News month of 5,000 WARCs tolerates 50). The
error starts with the first bad file's own message, then the count and the setting; nothing is published.

    python -m preprocessing.bad_inputs RUN/shards/quarantine.jsonl     # lists the files quarantined whole
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable

from bertfactory.errors import InputError

FILE_RECORD_ID = "<file>"  # the record_id of a quarantine record that stands for a whole file (CorruptInput)


def bad_input_entries(quarantine_lines: Iterable[str]) -> list[dict]:
    """The quarantine records that stand for a file broken part way, in (source, ordinal) order."""
    entries = [record for record in map(json.loads, quarantine_lines) if record.get("record_id") == FILE_RECORD_ID]
    return sorted(entries, key=lambda r: (r["source"], r["ordinal"], r["reason"]))


def allowed_bad_inputs(max_bad_inputs: int | float, input_files: int) -> int:
    """How many broken files a job of `input_files` files tolerates under corpus.max_bad_inputs."""
    if isinstance(max_bad_inputs, float):  # a fraction (CorpusConfig keeps floats in (0, 1), counts as ints)
        return math.floor(max_bad_inputs * input_files)
    return max_bad_inputs


def check_bad_inputs(entries: list[dict], input_files: int, max_bad_inputs: int | float) -> None:
    """InputError when more files broke than corpus.max_bad_inputs allows (the first file's message first)."""
    bad_files = sorted({entry["file"] for entry in entries})
    allowed = allowed_bad_inputs(max_bad_inputs, input_files)
    if len(bad_files) <= allowed:
        return
    first = entries[0]
    others = "; ".join(f"{e['file']}: {e['reason']} after {e['ordinal']} records" for e in entries[1:4])
    more = f" (and {len(entries) - 4} more)" if len(entries) > 4 else ""
    raise InputError(
        f"{first['file']}: {first['detail']}. "
        f"{len(bad_files)} of {input_files} input files are corrupt or truncated, more than corpus.max_bad_inputs="
        f"{max_bad_inputs} allows ({allowed}); nothing was published. "
        + (f"Also: {others}{more}. " if others else "")
        + "Replace the broken files, or raise corpus.max_bad_inputs to quarantine them and keep the rest.")


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        for entry in bad_input_entries(f):
            print(entry["file"], entry["reason"], entry["ordinal"], entry["detail"], sep="\t")
