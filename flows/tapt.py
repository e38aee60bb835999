"""Task-adaptive pretraining (TAPT, Gururangan et al. 2020) of a published model as one recipe
(configs/tapt-minilm.yaml): the stage `tapt` runs before the usual three, and the recipe the others see is
`with_tapt(recipe, run_dir)`, its paths filled in. No other flow code: preprocess, pretrain and evaluate are the
ordinary stages (flows/stages.py), with their stamps, resume and artifacts.

    tapt        RUN/tapt/unadapted   <- tapt.hf_model imported (training.hf.import_from_hf): the unadapted model
                RUN/tapt/corpus.jsonl <- the tasks' training texts, labels dropped (evaluation/task_corpus.py)
    preprocess  corpus.inputs: "tapt:tasks" -> RUN/tapt/corpus.jsonl; preprocess.tokenizer.path (when null) ->
                the model's tokenizer.json, adopted (its padding / truncation dropped)
    pretrain    pretrain.init_from -> tapt.hf_model: its encoder, the MLM head fresh (logged), continued MLM;
                pretrain.freeze_encoder_steps -> tapt.head_warmup_steps (the head alone trains, the encoder frozen:
                training/freeze.py); with tapt.epochs, pretrain.max_steps -> the warm-up + that many epochs of
                RUN/shards' train rows
    evaluate    the adapted RUN/pretrain/final, and RUN/tapt/unadapted as evaluate.compare_checkpoints

    bertfactory run configs/tapt-minilm.yaml --run-dir runs/tapt-minilm
    bertfactory run configs/tapt-minilm.yaml --run-dir runs/tapt-10ep \
        --set tapt.head_warmup_steps=100 --set tapt.epochs=10     # head warm-up, then 10 epochs
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from bertfactory.errors import ConfigError
from bertfactory.samples import resolve_input

from .recipe import Recipe
from .tapt_config import TASK_CORPUS_INPUT

logger = logging.getLogger("flows")

TAPT_DIR = "tapt"
UNADAPTED = f"{TAPT_DIR}/unadapted"  # relative to the run directory (evaluate.compare_checkpoints takes it so)
TASK_CORPUS = f"{TAPT_DIR}/corpus.jsonl"
HF_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def hf_model_dir(recipe: Recipe) -> Path:
    """tapt.hf_model as a directory (`sample:NAME` resolved to the cached sample)."""
    assert recipe.tapt is not None
    return resolve_input(recipe.tapt.hf_model).resolve()


def tapt_tasks(recipe: Recipe) -> dict:
    """The evaluate tasks (name -> TaskConfig) whose training texts make the task corpus."""
    assert recipe.tapt is not None
    enabled = recipe.evaluate.enabled_tasks()
    names = recipe.tapt.tasks or list(enabled)
    return {name: enabled[name] for name in names}


def tapt_max_steps(recipe: Recipe, run_dir: Path) -> int | None:
    """pretrain.max_steps under tapt.epochs: the head warm-up's steps plus ceil(epochs x steps per epoch) over the
    train rows of RUN/shards/manifest.json (training/data.py: rows // batch_size steps an epoch); None without
    tapt.epochs or before preprocess wrote the manifest (no stage before pretrain reads max_steps)."""
    assert recipe.tapt is not None
    manifest = Path(run_dir) / "shards" / "manifest.json"
    if recipe.tapt.epochs is None or not manifest.is_file():
        return None
    rows = int(json.loads(manifest.read_text(encoding="utf-8"))["splits"]["train"]["rows"])
    per_epoch = rows // recipe.pretrain.batch_size
    if per_epoch < 1:
        raise ConfigError(f"tapt.epochs: the task corpus has {rows} train rows in {manifest}, fewer than "
                          f"pretrain.batch_size ({recipe.pretrain.batch_size}): not one step an epoch")
    return recipe.tapt.head_warmup_steps + max(1, math.ceil(recipe.tapt.epochs * per_epoch))


def _pretrain_with(pretrain, update: dict):
    """The pretrain section with the tapt section's values, checked again (a warm-up must end before max_steps)."""
    from pydantic import ValidationError

    if set(update) == {"init_from"}:  # a path only: nothing a check reads
        return pretrain.model_copy(update=update)
    try:
        return type(pretrain).model_validate({**pretrain.model_dump(), **update})
    except ValidationError as err:
        raise ConfigError("tapt: " + "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())) from None


def with_tapt(recipe: Recipe, run_dir: Path) -> Recipe:
    """The recipe the ordinary stages run: the tapt section's paths filled in (module docstring). Unchanged
    without a tapt section; applying it twice changes nothing more."""
    if recipe.tapt is None:
        return recipe
    run_dir = Path(run_dir).resolve()  # one spelling of the corpus path, so every caller gets the same stage keys
    hf = hf_model_dir(recipe)
    inputs = [str(run_dir / TASK_CORPUS) if i == TASK_CORPUS_INPUT else i for i in recipe.corpus.inputs]
    tokenizer = recipe.preprocess.tokenizer
    if tokenizer.path is None:
        tokenizer = tokenizer.model_copy(update={"path": str(hf / "tokenizer.json")})
    compared = list(recipe.evaluate.compare_checkpoints)
    pretrain = {"init_from": str(hf)}
    if recipe.tapt.head_warmup_steps:
        pretrain["freeze_encoder_steps"] = recipe.tapt.head_warmup_steps
    steps = tapt_max_steps(recipe, run_dir)
    if steps is not None:
        pretrain["max_steps"] = steps
    # tapt.epochs before preprocess: max_steps unknown yet (and read by no stage before pretrain): checked once it is
    checked = recipe.tapt.epochs is None or steps is not None
    if recipe.tapt.compare_unadapted and UNADAPTED not in compared:
        compared.append(UNADAPTED)
    return recipe.model_copy(update={
        "corpus": recipe.corpus.model_copy(update={"inputs": inputs}),
        "preprocess": recipe.preprocess.model_copy(update={"tokenizer": tokenizer}),
        "pretrain": _pretrain_with(recipe.pretrain, pretrain) if checked else recipe.pretrain.model_copy(update=pretrain),
        "evaluate": recipe.evaluate.model_copy(update={"compare_checkpoints": compared}),
    })


def require_tapt_outputs(run_dir: Path, stage: str) -> None:
    """A stage of a tapt recipe run on its own (`bertfactory preprocess` / `evaluate`) needs what the tapt stage
    wrote; say which command writes it rather than that an input file is missing."""
    from bertfactory.errors import BertfactoryError

    from .stamps import STAGES

    missing = [o for o in STAGES["tapt"].outputs if not (Path(run_dir) / o).is_file()]
    if missing:
        raise BertfactoryError(f"{stage} of a tapt recipe needs {Path(run_dir) / missing[0]}, which the tapt stage "
                               "writes; run `bertfactory run` with the same --run-dir first")


def tapt_inputs(recipe: Recipe) -> tuple[dict, list[Path]]:
    """The config and files that decide whether the tapt stage must run again: the section, the tasks' settings,
    the model's files and the tasks' data files."""
    from evaluation.run import task_input_files

    tasks = tapt_tasks(recipe)
    config = {"tapt": recipe.tapt.model_dump(mode="json"),
              "tasks": {name: task.model_dump(mode="json") for name, task in tasks.items()}}
    hf = hf_model_dir(recipe)
    files = [hf / name for name in HF_FILES]
    scoped = recipe.evaluate.model_copy(update={"tasks": tasks, "crosslingual": [], "compare_checkpoints": []})
    return config, files + task_input_files(scoped)


def run_tapt(recipe: Recipe, run_dir: Path) -> dict:
    """The tapt stage: import the model, write the task corpus. Its summary: what was imported, and per task the
    documents and characters written."""
    from evaluation.task_corpus import write_task_corpus
    from training.hf import import_from_hf

    assert recipe.tapt is not None
    run_dir = Path(run_dir)
    hf = hf_model_dir(recipe)
    imported = import_from_hf(hf, run_dir / UNADAPTED, seed=recipe.tapt.import_seed, overwrite=True)
    tasks = write_task_corpus(tapt_tasks(recipe), run_dir / TASK_CORPUS)
    logger.info("tapt: imported %s (%s) into %s; task corpus %s: %s", hf, imported.architecture, imported.path,
                run_dir / TASK_CORPUS, ", ".join(f"{n} {t['documents']} documents" for n, t in tasks.items()))
    return {"hf_model": str(hf), "architecture": imported.architecture, "unadapted": UNADAPTED,
            "initialised_in_import": list(imported.initialised), "task_corpus": TASK_CORPUS, "tasks": tasks,
            "documents": sum(t["documents"] for t in tasks.values())}
