"""benchmarks/object_storage.py runs end to end at a tiny size (its figures are in benchmarks/RESULTS.md, never
asserted here): both parts report local and S3 side by side, with their ratios."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_object_storage_benchmark_reports_both_sides():
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "object_storage.py"), "--files", "3",
                          "--steps", "4", "--repeats", "1", "--copies", "1", "--exchange-files", "3"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stderr[-4000:]
    out = run.stdout
    assert re.search(r"^preprocess: 3 sotu files", out, re.M), out
    assert re.search(r"throughput S3 / local: \d+\.\d\dx", out), out
    for side in ("local", "s3 cold", "s3 warm"):
        assert len(re.findall(rf"^    {side} +[\d,]+ tokens/s", out, re.M)) == 2, (side, out)
    assert re.search(r"cold / tiny step [\d,]+x", out), out
    # the workers through the bucket: both setups (at 1x only here), against local disk (and hf for raw tokens)
    assert len(re.findall(r"^    s3, workers through the bucket +[\d.]+ s  peak tree RSS +[\d,]+ MiB  throughput vs "
                          r"local disk \d+\.\d\dx", out, re.M)) == 2, out
    assert len(re.findall(r"^    hf datasets \(local files\) +[\d.]+ s", out, re.M)) == 1, out
    assert len(re.findall(r"vs hf \d+\.\d\dx", out)) == 2, out
