"""bertfactory.provenance.result_provenance: what a benchmark's result file records so that
scripts/readme_quality.py can quote it (a short commit, whether the tree was dirty, the UTC date)."""

from datetime import datetime

from bertfactory.provenance import code_revision, result_provenance


def test_result_provenance_names_the_commit_the_tree_state_and_the_date():
    revision, found = code_revision(), result_provenance()
    assert set(found) == {"commit", "dirty", "date"}
    if revision["commit"] is None:  # an installed wheel: nothing to trace, and readme_quality refuses it
        assert found["commit"] is None and found["dirty"] is None
    else:
        assert revision["commit"].startswith(found["commit"]) and len(found["commit"]) == 7
        assert found["dirty"] is revision["dirty"]
    assert datetime.fromisoformat(found["date"]).utcoffset().total_seconds() == 0
