"""Shared paths of the infra/ tests."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"


@pytest.fixture
def repo() -> Path:
    return REPO
