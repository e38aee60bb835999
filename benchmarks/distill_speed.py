"""Inference speed-up and parameters of the distillation students against their teacher, side by side in one run,
on a task's real test inputs: the shapes of a distill config (DistilBERT every-other-layer, BERT-PKD first k
layers, TinyBERT narrow) built from the config's teacher. Speed does not depend on the weights, so nothing is
trained here: this is the speed half of the issue's goal (>= 1.8x for the 6-layer student), measured with the
stage's own timing (distillation.stage.inference_seconds: the models take turns inside every repeat, median of
`speed_repeats`, one warm-up pass).

    python benchmarks/distill_speed.py --run-dir runs/teacher12 --config configs/distill-12layer.yaml \\
        --set task=trec_coarse --set speed_repeats=5
    python benchmarks/distill_speed.py --run-dir runs/distill-minilm --config configs/distill-minilm.yaml \\
        --set speed_repeats=7     # MiniLM (the tapt run's adapted one): 3-of-6 and 4 x 312 students
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bertfactory  # noqa: E402,F401  before torch: the pinned CPU kernels (bertfactory/cpu_kernels.py)
import torch  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from evaluation.encode import TextEncoder
    from evaluation.finetune import prepare_task
    from evaluation.heads import TaskModel
    from evaluation.tasks.registry import BUILTIN_TASKS
    from distillation.stage import inference_clock, inference_seconds, load_distill_config, load_teacher
    from distillation.models import distilbert_student, first_layers_student, narrow_student, num_parameters

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True, help="run directory holding the config's teacher")
    parser.add_argument("--config", required=True, help="distill YAML (e.g. configs/distill-12layer.yaml)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = load_distill_config(args.config, args.overrides)
    run_dir = Path(args.run_dir)
    teacher, tokenizer_path = load_teacher(cfg, run_dir, run_dir / "distill-speed")
    text_encoder = TextEncoder.from_file(tokenizer_path)
    task = prepare_task(BUILTIN_TASKS[cfg.task](None), text_encoder, cfg.finetune)
    pretrainer, t = teacher.model, cfg.tinybert
    encoders = {"teacher": pretrainer.bert,
                "distilbert": distilbert_student(pretrainer, cfg.distilbert.teacher_layers).bert,
                f"pkd_{cfg.pkd.strategy}": first_layers_student(pretrainer, cfg.pkd.student_layers).bert,
                "tinybert": narrow_student(pretrainer.config, t.hidden_size, t.num_layers, t.intermediate_size,
                                           t.num_heads, cfg.seed).bert}
    if not cfg.pkd.enabled:  # a config without PKD (distill-minilm) has no PKD student to time
        del encoders[f"pkd_{cfg.pkd.strategy}"]
    torch.manual_seed(cfg.seed)
    models = {name: TaskModel(enc, task.spec.task_type, task.num_labels, 0.0) for name, enc in encoders.items()}
    started = time.perf_counter()
    seconds = dict(zip(models, inference_seconds(list(models.values()), task, cfg, text_encoder.pad_id)))
    print(f"task {cfg.task}: {len(task.test.features.ids)} test inputs, max_seq_len {cfg.finetune.max_seq_len}, "
          f"batch {cfg.finetune.eval_batch_size}, median of {cfg.speed_repeats} passes, {args.threads} thread(s), "
          f"{inference_clock(torch.device(cfg.device))[1]}, teacher {teacher.source}")
    print("| model | layers x hidden (heads) | params | non-embedding params | seconds / pass | speed-up |")
    print("|---|---|---|---|---|---|")
    for name, model in models.items():
        c = model.encoder.config
        embedding = num_parameters(model.encoder.embeddings)
        print(f"| {name} | {c.num_layers} x {c.hidden_size} ({c.num_heads}) | {num_parameters(model):,} | "
              f"{num_parameters(model) - embedding:,} | {seconds[name]:.3f} | {seconds['teacher'] / seconds[name]:.2f}x |")
    print(f"wall seconds: {time.perf_counter() - started:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
