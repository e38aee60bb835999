"""Knowledge distillation (DistilBERT, BERT-PKD, TinyBERT): losses.py, layer_map.py, models.py (students),
outputs.py (hidden states + pre-softmax attention), loop.py (the one loop and its objectives), augment.py
(TinyBERT data augmentation), stage.py (`bertfactory distill CONFIG --run-dir RUN`).

A package of its own above training and evaluation (docs/architecture.md): it trains students with training's loop
and scores them with evaluation's fine-tuning, and neither of those imports it."""

import bertfactory  # noqa: F401  (first: pins torch's CPU kernels before torch loads, bertfactory/cpu_kernels.py)
