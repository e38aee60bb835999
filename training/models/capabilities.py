"""The options of the pretraining stage that only some architectures implement, and which architecture implements
which, declared without torch: a recipe's cross-checks (training/recipe_checks.py) read them when the recipe loads,
without importing a model. Each model module's `ARCHITECTURE` takes its `supports` from `SUPPORTS`, and
training/models/registry.py checks at import that every registered architecture declares exactly its entry.

    from training.models.capabilities import UNPAD, supporting
    supporting(UNPAD)   # ['BertForPreTraining', 'ModernBertForMaskedLM']
"""

from __future__ import annotations

# Options of the pretraining stage that only some architectures implement; each architecture declares the ones it
# does (`Architecture.supports`), and the stage refuses an option its architecture does not declare
UNPAD = "unpad"  # pretrain.unpad: the model's forward runs on the real tokens only (`model.unpad_by_default`)
STATIC_SHAPES = "static_shapes"  # pretrain.static_shapes: MLM logits at every prediction slot (`model.static_shapes`)
# pretrain.stacking: training/stacking.py's copy of layer i to L + i gives a model of the doubled config whose new
# layers are the old ones applied again (not so where a layer's form depends on its index, as ModernBERT's)
STACKING = "stacking"
CAPABILITIES = frozenset({UNPAD, STATIC_SHAPES, STACKING})

# architecture name (config.json's `architecture`) -> the options it implements; an architecture not listed
# implements none. ModernBERT runs BertForPreTraining's forward, hence the same two; stacking is not ModernBERT's
SUPPORTS: dict[str, frozenset[str]] = {
    "BertForPreTraining": frozenset({UNPAD, STATIC_SHAPES, STACKING}),
    "SpanBertForPreTraining": frozenset({STACKING}),
    "XlmForPreTraining": frozenset({STACKING}),
    "ModernBertForMaskedLM": frozenset({UNPAD, STATIC_SHAPES}),
}


def supports(architecture: str, option: str) -> bool:
    """Whether the architecture of that name implements the option (one of CAPABILITIES)."""
    return option in SUPPORTS.get(architecture, frozenset())


def supporting(option: str) -> list[str]:
    """The names of the architectures that implement the option, sorted."""
    return sorted(name for name, options in SUPPORTS.items() if option in options)
