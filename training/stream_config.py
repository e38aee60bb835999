"""Which recipes may use `pretrain.stream_batches` (the stream loader, training/streams.py): the objectives that
carry a memory across batches, and the pretrain keys it cannot be combined with. Declared without torch, so that
PretrainConfig's validator checks it when a recipe loads without importing the loader.

    from training.stream_config import stream_batches_problem
    stream_batches_problem(pretrain_cfg)   # a line saying why not, or None
"""

from __future__ import annotations

# objectives whose model carries a memory from a row to the next row of its slot
STREAM_OBJECTIVES = ("txl_clm", "plm")


def stream_batches_problem(cfg) -> str | None:
    """Why `pretrain.stream_batches` cannot be used with this PretrainConfig, or None."""
    if cfg.objective not in STREAM_OBJECTIVES:
        return (f"stream_batches feeds a memory carried across batches, which objective {cfg.objective!r} has none "
                f"of; use it with {' or '.join(STREAM_OBJECTIVES)}")
    for key in ("length_buckets", "batch_size_ramp", "tlm_shards", "stacking"):
        if getattr(cfg, key, None):
            return (f"stream_batches cannot be combined with {key}: it changes which rows a step reads, while each "
                    "batch slot must read its documents' segments in order")
    return None
