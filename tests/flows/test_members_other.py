"""The relative-position and multilingual members' (XLNet, Transformer-XL, ModernBERT's rotary positions, XLM,
mBERT) tiny twins end to end through `bertfactory run` (Prefect) and their pretrain stage under
`torchrun --nproc_per_node 2` (tests/flows/members.py says what is checked). Two files so that the two test
workers share the members."""

from __future__ import annotations

import pytest

from .members import run_twin_through_flow_and_torchrun

pytestmark = [pytest.mark.slow,  # a pipeline and a 2-process pretraining per member
              pytest.mark.usefixtures("cli_on_shared_prefect")]

# member -> (tiny twin, the headline metric of its evaluation)
MEMBERS = {
    "xlnet": ("tiny-xlnet.yaml", "plm_loss"),
    "transformer-xl": ("tiny-transformer-xl.yaml", "clm_loss", False),  # a causal LM: nothing to fine-tune
    "xlm": ("tiny-xlm.yaml", "mlm_loss"),
    "mbert": ("tiny-mbert.yaml", "mlm_loss"),
    "modernbert": ("tiny-modernbert.yaml", "mlm_loss"),
}


@pytest.mark.parametrize("member", sorted(MEMBERS))
def test_tiny_twin_runs_through_the_flow_and_under_torchrun(member, tmp_path):
    run_twin_through_flow_and_torchrun(*MEMBERS[member], tmp_path=tmp_path)
