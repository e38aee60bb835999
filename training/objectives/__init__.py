"""Training objectives of the family. An objective is a loss function `(model, batch) -> dict` with a scalar
`loss` to minimise plus scalar metrics (`mlm_loss`, `nsp_loss`, `mlm_correct`, `mlm_count`, ...) that the trainer
averages into metrics.jsonl, and an `ObjectiveSpec` saying which architecture it trains and which shards it can
read. `pretrain.objective` names one.

Adding an objective = its entry in its member's row (`Member.objectives` in training/models/<member>/settings.py:
architecture, instance formats, descriptions, declared without torch, so a recipe validates without importing a
model), naming its loss function (`loss_function`): one of `LOSS_FUNCTIONS` below, or a new module here and its
entry there when no existing loss fits.

    from training.objectives import get_objective_spec
    spec = get_objective_spec("mlm_sop")
    spec.check_shards(manifest, "RUN/shards/manifest.json")   # ContractError when the shards cannot feed it
    out = spec.loss(model, batch)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from bertfactory.errors import ContractError

from ..models.members import ObjectiveInfo, objective_info
from ..models.members import objective_names as _declared_names
from .electra import electra
from .mlm import mlm_only
from .mlm_nsp import mlm_nsp
from .plm import permutation_lm
from .txl import recurrent_clm
from .sbo import mlm_sbo
from .sop import mlm_sop
from ..xlm_data import prepare_batches as prepare_xlm_batches
from .xlm import clm, tlm, xlm_mlm, xlm_mlm_tlm

Objective = Callable[[torch.nn.Module, dict[str, torch.Tensor]], dict[str, torch.Tensor | None]]

# What a shard set of schema v1 without `instance_format.name` holds (the foundation's only format).
DEFAULT_INSTANCE_FORMAT = "nsp-pairs"


@dataclass(frozen=True, kw_only=True)
class ObjectiveSpec(ObjectiveInfo):
    """An objective's catalogue entry (training/models/members.py: name, architecture, instance formats,
    descriptions, sentence head) with its loss function."""

    loss: Objective
    # (batches, model config, pretrain config, run dir) -> the loader to train on: the pretrain stage's hook for
    # objectives whose batches need more than the run's shards (XLM: languages per row, TLM pairs beside MLM)
    prepare_batches: Callable[[Any, Any, Any, Any], Any] | None = None

    @classmethod
    def of(cls, info: ObjectiveInfo, loss: Objective,
           prepare_batches: Callable[[Any, Any, Any, Any], Any] | None = None) -> "ObjectiveSpec":
        return cls(**{f.name: getattr(info, f.name) for f in dataclasses.fields(ObjectiveInfo)}, loss=loss,
                   prepare_batches=prepare_batches)

    def configure(self, arch_config: Any) -> Any:
        """The architecture's config with only the heads this objective trains (a config with a `sentence_head`
        field gets this objective's value; other architectures are returned unchanged)."""
        if dataclasses.is_dataclass(arch_config) and any(f.name == "sentence_head"
                                                         for f in dataclasses.fields(arch_config)):
            return dataclasses.replace(arch_config, sentence_head=self.sentence_head)
        return arch_config

    def check_shards(self, manifest: Any, source: str) -> None:
        """Refuse shards built for another objective, naming the manifest field and the format(s) needed."""
        fmt = instance_format_name(manifest)
        if fmt not in self.instance_formats:
            raise ContractError(
                f"{source}: the shards were built as instance format {fmt!r} (field instance_format.name), but "
                f"objective {self.name!r} needs {self.needs}, which only instance format(s) "
                f"{', '.join(self.instance_formats)} provide; rebuild the shards with one of them "
                f"(preprocess.instances.format) or choose another pretrain.objective"
            )


def instance_format_name(manifest: Any) -> str:
    fmt = manifest.instance_format if hasattr(manifest, "instance_format") else manifest["instance_format"]
    name = fmt.get("name", DEFAULT_INSTANCE_FORMAT) if isinstance(fmt, Mapping) else DEFAULT_INSTANCE_FORMAT
    return str(name)


_OBJECTIVES: dict[str, ObjectiveSpec] = {}


def register_objective(spec: ObjectiveSpec) -> ObjectiveSpec:
    _OBJECTIVES[spec.name] = spec
    return spec


# the loss functions an objective names (`ObjectiveInfo.loss_function`), by function name: a member trained by an
# existing loss names it and touches nothing here
LOSS_FUNCTIONS: dict[str, Objective] = {f.__name__: f for f in (
    mlm_nsp, mlm_only, mlm_sop, electra, mlm_sbo, clm, xlm_mlm, tlm, xlm_mlm_tlm, permutation_lm, recurrent_clm)}
# the hooks for objectives whose batches need more than the run's shards (`ObjectiveInfo.batches`)
BATCH_HOOKS: dict[str, Callable[[Any, Any, Any, Any], Any]] = {"xlm": prepare_xlm_batches}

for _name in _declared_names():
    _info = objective_info(_name)
    if _info.loss_function not in LOSS_FUNCTIONS or (_info.batches is not None and _info.batches not in BATCH_HOOKS):
        raise ContractError(f"objective {_name} names loss function {_info.loss_function!r} / batch hook "
                            f"{_info.batches!r}; training/objectives/__init__.py has the loss functions "
                            f"{', '.join(LOSS_FUNCTIONS)} and the batch hooks {', '.join(BATCH_HOOKS)}")
    register_objective(ObjectiveSpec.of(_info, LOSS_FUNCTIONS[_info.loss_function],
                                        BATCH_HOOKS.get(_info.batches) if _info.batches else None))
del _name, _info


objective_names = _declared_names  # every objective the members declare is registered above


def get_objective_spec(name: str) -> ObjectiveSpec:
    objective_info(name)  # a KeyError naming the known objectives for any other
    return _OBJECTIVES[name]


def get_objective(name: str) -> Objective:
    return get_objective_spec(name).loss


OBJECTIVES = _OBJECTIVES  # read-only view for callers that list them
