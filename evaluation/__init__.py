"""The evaluation stage: intrinsic MLM/NSP scores on held-out shards and fine-tuning on downstream tasks, written
to RUN/eval/results.json (contract: docs/results.md) and RUN/eval/report.md. Entry point:
`evaluation.run.run_evaluate(cfg, run_dir)`."""

import bertfactory  # noqa: F401  (first: pins torch's CPU kernels before torch loads, bertfactory/cpu_kernels.py)
