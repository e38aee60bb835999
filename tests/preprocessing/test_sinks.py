"""preprocessing.sinks.WriteSmallLines: one sorted part file, written in one stage, rewritten byte for byte by a
rerun; no file for no lines."""

import apache_beam as beam

from preprocessing.config import RunnerConfig
from preprocessing.runners import run_pipeline
from preprocessing.sinks import PART_NAME, WriteSmallLines


def _write(lines, directory):
    run_pipeline(lambda p: p | beam.Create(lines) | WriteSmallLines(directory), RunnerConfig(preset="in_process"),
                 "sink test")


def test_lines_land_sorted_in_one_file_and_a_rerun_gives_the_same_bytes(tmp_path):
    lines = [f'["lang-{i % 7}", {i}]' for i in range(500)]
    _write(lines[::-1], tmp_path / "out")
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == [PART_NAME]  # no temporary file left behind
    first = (tmp_path / "out" / PART_NAME).read_bytes()
    assert first.decode().splitlines() == sorted(lines)
    _write(lines, tmp_path / "out")  # another input order: the same bytes
    assert (tmp_path / "out" / PART_NAME).read_bytes() == first


def test_no_lines_no_file(tmp_path):
    _write([], tmp_path / "empty")
    assert not (tmp_path / "empty").exists() or not any((tmp_path / "empty").iterdir())
