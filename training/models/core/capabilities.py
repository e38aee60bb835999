"""The options of the pretraining stage that only some architectures implement, declared without torch. Which
member implements which is its `Member.supports` (training/models/<member>/settings.py); training/models/members.py
gathers them (`supports`, `supporting`), which a recipe's cross-checks (training/recipe_checks.py) read when the
recipe loads, without importing a model.

    from training.models.core.capabilities import UNPAD
    from training.models.members import supporting
    supporting(UNPAD)   # ['BertForPreTraining', 'ModernBertForMaskedLM']
"""

from __future__ import annotations

# Options of the pretraining stage that only some architectures implement; each member declares the ones it
# does (`Member.supports`), and the stage refuses an option its architecture does not declare
UNPAD = "unpad"  # pretrain.unpad: the model's forward runs on the real tokens only (`model.unpad_by_default`)
STATIC_SHAPES = "static_shapes"  # pretrain.static_shapes: MLM logits at every prediction slot (`model.static_shapes`)
# pretrain.stacking: training/stacking.py's copy of layer i to L + i gives a model of the doubled config whose new
# layers are the old ones applied again (not so where a layer's form depends on its index, as ModernBERT's)
STACKING = "stacking"
# pretrain.fused_mlm_loss: the MLM decoder and its cross-entropy chunk by chunk in training steps (`model.fused_mlm_loss`)
FUSED_MLM_LOSS = "fused_mlm_loss"
CAPABILITIES = frozenset({UNPAD, STATIC_SHAPES, STACKING, FUSED_MLM_LOSS})

# The attributes through which the pretraining stage switches a built model to these options (training/
# pretrain_model.py `build_model`); not weights, not config. A model rebuilt during a run (progressive stacking's
# deeper model, training/stacking.py) takes them over from the model it replaces.
MODEL_SWITCHES = ("unpad_by_default", "unpad_layout", "static_shapes", "fused_mlm_loss")


def check_capabilities(owner: str, supports: frozenset[str]) -> None:
    """ValueError naming `owner` (an architecture, a member) when `supports` holds anything but CAPABILITIES."""
    unknown = sorted(set(supports) - CAPABILITIES)
    if unknown:
        raise ValueError(f"{owner}: unknown capabilities {', '.join(unknown)}; known: {', '.join(sorted(CAPABILITIES))}")
