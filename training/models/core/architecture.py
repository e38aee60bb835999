"""What a checkpoint architecture is (`Architecture`): the name stored in config.json's `architecture`, the config
class that parses its `model` section, the module that `load_pretrained` builds, how a recipe's `model` section
becomes its config, and the pretraining options it implements. Each member's model.py defines its `ARCHITECTURE`
(name, supports and settings taken from its `MEMBER` row); training/models/registry.py lists them.

Every pretraining model class provides `config` (with `to_dict()`), `num_parameters()` and `backbone()`: the
encoder that fine-tuning and feature extraction use, a module called as
`backbone(input_ids, token_type_ids, attention_mask, output_hidden_states=False)` with a `pooler` and
`config.hidden_size` (BertModel's interface), and `untrained_parameter_names()`: the parameters its objective
leaves without a gradient at this point of training (e.g. the pooler, which only a sentence-level loss or
fine-tuning trains). The trainer freezes those and gives DistributedDataParallel only the others, which is how
every member trains under torchrun without `find_unused_parameters` (training/trainer.py, `_sync_trainable`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from torch import nn

# the options only some architectures implement, and which implements which: capabilities.py (without torch, for
# a recipe's checks); importable from here too
from .capabilities import CAPABILITIES, FUSED_MLM_LOSS, STACKING, STATIC_SHAPES, UNPAD, check_capabilities  # noqa: F401


@dataclass(frozen=True)
class Architecture:
    name: str
    config_from_dict: Callable[[Mapping[str, Any], str], Any]  # (data, source for error messages) -> config
    build: Callable[[Any], nn.Module]
    # (training.config.ModelConfig, tokenizer vocabulary size, pad id) -> config: how a recipe's model section
    # becomes this architecture's config
    from_model_config: Callable[[Any, int, int], Any]
    description: str
    # the CAPABILITIES this architecture implements (declared, so nothing probes a model instance for them):
    # its member's `Member.supports`, which registry.py checks
    supports: frozenset[str] = frozenset()
    # the member's own settings in a recipe: (key of the sub-section of `model`, its RECIPE_SECTION dataclass, whose
    # docstring describes it); None = the encoder fields alone
    settings: tuple[str, type] | None = None

    def __post_init__(self) -> None:
        check_capabilities(f"architecture {self.name}", self.supports)
