"""The absolute-position members' (BERT, RoBERTa, ALBERT, SpanBERT, ELECTRA) tiny twins
end to end through `bertfactory run` (Prefect) and their pretrain stage under
`torchrun --nproc_per_node 2` (tests/flows/members.py says what is checked). Two files so that the two test
workers share the members."""

from __future__ import annotations

import pytest

from .members import run_twin_through_flow_and_torchrun

pytestmark = [pytest.mark.slow,  # a pipeline and a 2-process pretraining per member
              pytest.mark.usefixtures("cli_on_shared_prefect")]

# member -> (tiny twin, the headline metric of its evaluation)
MEMBERS = {
    "bert": ("local.yaml", "mlm_loss"),
    "roberta": ("tiny-roberta.yaml", "mlm_loss"),
    "albert": ("tiny-albert.yaml", "mlm_loss"),
    "spanbert": ("tiny-spanbert.yaml", "mlm_loss"),
    "electra": ("tiny-electra.yaml", "mlm_loss"),
}


@pytest.mark.parametrize("member", sorted(MEMBERS))
def test_tiny_twin_runs_through_the_flow_and_under_torchrun(member, tmp_path):
    run_twin_through_flow_and_torchrun(*MEMBERS[member], tmp_path=tmp_path)
