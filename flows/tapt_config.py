"""Config section `tapt` (TaptConfig): task-adaptive pretraining of a published model (Gururangan et al. 2020) as
one recipe, run by flows/tapt.py before the usual stages. Null (the default) = no such stage.

    tapt:
      hf_model: sample:minilm          # a Hugging Face BERT directory or a fetched sample
      tasks: [movie_sentiment, trec_coarse]
    corpus:
      inputs: ["tapt:tasks"]           # the tasks' training texts (labels dropped); domain JSONL files beside it
      format: jsonl

`tapt_problems(recipe)` lists what a recipe with a tapt section gets wrong; flows/recipe.py refuses the recipe
with them when it loads.
"""

from __future__ import annotations

from pydantic import Field

from bertfactory.config import StrictModel, did_you_mean

TASK_CORPUS_INPUT = "tapt:tasks"  # the corpus.inputs entry the tapt stage's task corpus takes the place of
TAPT_OBJECTIVES = ("mlm", "mlm_nsp")  # objectives whose model (BertForPreTraining) starts from a HF BERT


class TaptConfig(StrictModel):
    """Task-adaptive pretraining: the stage `tapt` imports `hf_model` (RUN/tapt/unadapted, evaluated beside the
    adapted model) and writes the tasks' unlabeled training texts (RUN/tapt/corpus.jsonl); then preprocess adopts
    the model's tokenizer, pretrain continues from its weights, evaluate fine-tunes both."""

    hf_model: str = Field(description="the model to adapt: a Hugging Face BERT directory (config.json, "
                          "model.safetensors, tokenizer.json) or `sample:NAME` (e.g. sample:minilm). Its tokenizer.json "
                          "becomes preprocess.tokenizer.path unless that names one (e.g. its vocab.txt), its weights "
                          "pretrain.init_from (the heads it lacks start fresh)")
    tasks: list[str] | None = Field(None, min_length=1, description="the evaluate tasks whose TRAINING split texts, "
                                    "labels dropped, are the task corpus (evaluation/task_corpus.py); null = every "
                                    "enabled evaluate task")
    compare_unadapted: bool = Field(True, description="also fine-tune the unadapted import (RUN/tapt/unadapted) on "
                                    "every task with the same settings (added to evaluate.compare_checkpoints)")
    import_seed: int = Field(0, ge=0, description="torch seed of the heads the imported copy lacks (RUN/tapt/unadapted "
                             "is only fine-tuned: they are never used)")
    head_warmup_steps: int = Field(0, ge=0, description="first train only the fresh MLM head, the imported encoder "
                                   "frozen (embeddings and the tied decoder included), for this many steps: becomes "
                                   "pretrain.freeze_encoder_steps (training/freeze.py). 0 = none")
    epochs: float | None = Field(None, gt=0.0, description="then continue pretraining the whole model for this many "
                                 "epochs of the task corpus: pretrain.max_steps becomes head_warmup_steps + "
                                 "ceil(epochs x steps per epoch), an epoch being the train rows of RUN/shards // "
                                 "pretrain.batch_size, read when pretrain starts (after preprocess). Gururangan et "
                                 "al. 2020 run 100. null = pretrain.max_steps as the recipe says")


def tapt_problems(recipe) -> list[str]:
    """What a recipe (flows.recipe.Recipe) with or without a tapt section gets wrong, one phrase each."""
    listed = TASK_CORPUS_INPUT in recipe.corpus.inputs
    if recipe.tapt is None:
        return [f"corpus.inputs lists {TASK_CORPUS_INPUT!r}, which only a `tapt` section provides"] if listed else []
    problems = []
    if not listed:
        problems.append(f"tapt: corpus.inputs must list {TASK_CORPUS_INPUT!r} (the tasks' training texts), with any "
                        "domain corpus beside it")
    if recipe.corpus.format != "jsonl":
        problems.append(f"tapt: corpus.format must be jsonl (the task corpus is JSONL), not {recipe.corpus.format!r}")
    if recipe.pretrain.init_from is not None:
        problems.append("tapt: leave pretrain.init_from null; pretraining starts from tapt.hf_model")
    if recipe.pretrain.objective not in TAPT_OBJECTIVES:
        problems.append(f"tapt: pretrain.objective must be one of {', '.join(TAPT_OBJECTIVES)} (a BERT continues from "
                        f"a Hugging Face BERT), not {recipe.pretrain.objective!r}")
    warmup = recipe.tapt.head_warmup_steps
    if warmup and recipe.pretrain.freeze_encoder_steps:
        problems.append("tapt: set the head warm-up in one place, tapt.head_warmup_steps, and leave "
                        "pretrain.freeze_encoder_steps 0")
    if warmup and recipe.tapt.epochs is None and warmup >= recipe.pretrain.max_steps:
        problems.append(f"tapt.head_warmup_steps ({warmup}) must be < pretrain.max_steps ({recipe.pretrain.max_steps}), "
                        "or set tapt.epochs (then max_steps = the warm-up + those epochs)")
    enabled = recipe.evaluate.enabled_tasks()
    unknown = [t for t in recipe.tapt.tasks or () if t not in enabled]
    if unknown:
        close = [hint for t in unknown if (hint := did_you_mean(t, enabled))]  # trec_corse: did you mean 'trec_coarse'?
        problems.append(f"tapt.tasks {', '.join(unknown)} not among the enabled evaluate.tasks "
                        f"({', '.join(enabled) or 'none'}){'; ' + '; '.join(close) if close else ''}")
    if not (recipe.tapt.tasks or enabled):
        problems.append("tapt: no task to adapt to (tapt.tasks is null and evaluate.tasks has no enabled task)")
    return problems
