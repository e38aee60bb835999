"""A user error raised inside a Beam worker reaches the user once, as the CLI's one `error:` line, with none of the
workers' tracebacks (issue 23, item 7: it used to print seven tracebacks, ~170 lines, first). The error here is a
multistream dump whose index lists a page more than the dump holds (the index belongs to another dump), which only
the worker reading that chunk can find."""

from __future__ import annotations

import bz2
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BERTFACTORY = Path(sys.executable).with_name("bertfactory")


def _multistream_with_a_wrong_index(directory: Path, wiki) -> Path:
    """Wikimedia's layout (header stream, one stream of pages, closing stream, bz2 index beside it), the index
    listing one page that no stream holds."""
    pages = wiki.standard_pages()[:12]
    dump = directory / "testwiki-pages-articles-multistream.xml.bz2"
    with open(dump, "wb") as out:
        out.write(bz2.compress(wiki.header.encode()))
        offset = out.tell()
        out.write(bz2.compress("".join(pages).encode()))
        out.write(bz2.compress(b"</mediawiki>\n"))
    lines = [f"{offset}:{100 + i}:Page {i}\n" for i in range(len(pages) + 1)]
    (directory / "testwiki-pages-articles-multistream-index.txt.bz2").write_bytes(bz2.compress("".join(lines).encode()))
    return dump


def test_a_worker_user_error_is_one_clean_line(tmp_path, wiki):
    dump = _multistream_with_a_wrong_index(tmp_path, wiki)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [str(BERTFACTORY), "preprocess", "--input", str(dump), "--format", "wikipedia", "--vocab-size", "200",
         "--out", str(tmp_path / "run"), "--no-prefect", "--set", "corpus.multistream_chunk_streams=1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    wanted = "the streams at bytes"
    error_lines = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(error_lines) == 1 and str(dump) in error_lines[0] and wanted in error_lines[0], output[-3000:]
    assert "the multistream index says 13" in error_lines[0]
    assert "Traceback" not in output, output[-3000:]
    assert output.count("the multistream index says") == 1 and "bertfactory-input-error" not in output
