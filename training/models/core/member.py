"""What a member of the family declares about itself, without torch: the row its settings module
(training/models/<member>/settings.py) holds as `MEMBER`, from which training/models/members.py builds every table
the rest of the code reads (the architectures, the recipe's settings sub-sections, the capabilities, the objective
catalogue, the FLOPs terms, the Hugging Face import / export table).

    MEMBER = Member(
        name="ModernBERT", architecture="ModernBertForMaskedLM", model="training.models.modernbert.model",
        supports=frozenset({UNPAD, STATIC_SHAPES}), settings=("modernbert", ModernBertSettings),
        objectives=(ObjectiveInfo(name="modernbert_mlm", ..., loss_function="mlm_only"),), flops=flops_terms,
        hf=HfRow(adapter="modernbert", reads="ModernBertForMaskedLM or ModernBertModel",
                 export="export_modernbert_to_hf", exports=("ModernBertForMaskedLM",), layouts=("modernbert",),
                 imports=(("modernbert", "import_modernbert_from_hf"),)))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .capabilities import check_capabilities

# Instance formats whose rows carry precomputed masks over real text (anything but parallel/causal layouts).
MASKED_TEXT_FORMATS = ("nsp-pairs", "sop-pairs", "full-sentences", "doc-sentences", "single-segment")


@dataclass(frozen=True)
class ObjectiveInfo:
    """What a pretraining objective is, without its loss function (training/objectives/ pairs each with its loss:
    `ObjectiveSpec`, which extends this)."""

    name: str
    architecture: str  # the Member.architecture of the model it trains
    instance_formats: tuple[str, ...]  # shard instance formats it can train on
    needs: str  # what it reads from a row, for error messages, e.g. "sentence-order labels (shard field nsp_label)"
    description: str
    # the loss function, by its name in training/objectives/ (`LOSS_FUNCTIONS`): a member trained by an existing
    # loss names it (ModernBERT's modernbert_mlm: "mlm_only")
    loss_function: str
    # it trains a sentence-pair head (NSP / SOP) on the pooled [CLS]; the model is built with one only then
    sentence_head: bool = False
    # the pretraining stage's hook for batches that need more than the run's shards, by its name in
    # training/objectives/ (`BATCH_HOOKS`; XLM: "xlm", languages per row and TLM pairs); None = the shards alone
    batches: str | None = None


@dataclass(frozen=True)
class HfRow:
    """A member's place in the Hugging Face table (training/hf/__init__.py): the adapter module
    training/hf/<adapter>.py and the names of its functions."""

    adapter: str  # module name under training/hf/
    reads: str = ""  # the transformers classes its import reads, for the CLI's help ("" = none)
    export: str | None = None  # (model_dir, out, overwrite, layout) -> out; None = not exported
    exports: tuple[str, ...] = ()  # the transformers classes the export writes, for the CLI's help
    layouts: tuple[str, ...] = ()  # values of `bertfactory export --layout` this member's export accepts
    # config.json model_type -> the adapter's import function (hf_dir, out, hf_config, seed) -> HfImport
    imports: tuple[tuple[str, str], ...] = ()


# (objective, architecture config, S real tokens, predicted fraction f, stage, rows per batch or None, memory
# carried across batches) -> [(term name, forward FLOPs per row, backward factor)] (training/flops.py)
FlopsTerms = Callable[[ObjectiveInfo, Any, float, float, str, "int | None", bool], list[tuple[str, float, float]]]


@dataclass(frozen=True)
class Member:
    name: str  # as docs/family.md's tables name it
    architecture: str  # config.json's `architecture` (Architecture.name of its model module)
    model: str  # the module defining its `ARCHITECTURE` (imported by training/models/registry.py only)
    objectives: tuple[ObjectiveInfo, ...]
    flops: FlopsTerms  # the matrix-product FLOPs of a step of each of its objectives
    # the pretraining options of CAPABILITIES it implements (the stage refuses the others when the recipe loads)
    supports: frozenset[str] = frozenset()
    # its own sub-section of a recipe's `model`: (key, RECIPE_SECTION dataclass); None = the encoder fields alone
    settings: tuple[str, type] | None = None
    hf: HfRow | None = None
    no_hf: str | None = None  # why there is no HF counterpart, when `hf` is None
    # names earlier releases wrote into config.json's `architecture` (those checkpoints load)
    former_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_capabilities(f"member {self.name}", self.supports)
        if (self.hf is None) == (self.no_hf is None):
            raise ValueError(f"member {self.name}: give either its HF adapter (hf) or why it has none (no_hf)")
        wrong = [o.name for o in self.objectives if o.architecture != self.architecture]
        if wrong:
            raise ValueError(f"member {self.name}: objective(s) {', '.join(wrong)} name another architecture")
