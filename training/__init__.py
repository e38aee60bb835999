"""Pretraining: BERT models (models/), the shard loader (data), optimiser (optim), objectives, the training loop
(trainer), checkpoints (checkpoint, hf) and the stage entry point `training.pretrain.run_pretrain`."""

import bertfactory  # noqa: F401  (first: pins torch's CPU kernels before torch loads, bertfactory/cpu_kernels.py)
