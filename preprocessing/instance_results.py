"""What the instances pipeline leaves in the staging directory, summed on the driver: the splits (shards with rows
and sha256; an empty shard written where no instance landed), instance/token/mask counts, language-sampling copies,
and documents that tokenised to nothing moved from kept to dropped. Spill files are removed here.

    python -c "from preprocessing.instance_results import collect_instance_results; help(collect_instance_results)"
"""

from __future__ import annotations

import json
import shutil
from collections import Counter

from .config import PreprocessConfig
from .instance_pipeline import shard_name
from .masking_policies import SPAN_BOUND_POLICIES
from .planning import instance_plan
from .shards import SPLITS, ShardInfo, SplitInfo, write_shard
from .staging import Staging, read_lines


def collect_instance_results(cfg: PreprocessConfig, counts: dict, staging: Staging,
                             vocab_size: int) -> tuple[dict[str, SplitInfo], dict]:
    """The instances pipeline's outputs -> the splits and the instance counts; empty shards filled in, spill files
    removed, documents without tokens moved from kept to dropped in `counts`."""
    plan = instance_plan(cfg, counts)  # the counts the job planned with: the buckets and copy rates it used
    buckets, rates = plan["buckets"], plan["copy_rates"]
    for spilled in sorted(staging.shards.glob("*/.spill-*")):  # merged into their shards; never published
        shutil.rmtree(spilled)
    if rates:
        copies = {lang: {"docs": d, "copies": c, "rate": round(rates.get(lang, 1.0), 6)}
                  for lang, d, c in sorted(map(json.loads, read_lines(str(staging.work / "copies" / "part*.jsonl"))))}
        counts["language_sampling"] = {"alpha": cfg.language_sampling.alpha, "languages": copies}
    for doc in map(json.loads, read_lines(str(staging.work / "no_tokens" / "part*.jsonl"))):
        counts["docs_kept"] -= 1
        counts["docs"][doc["split"]] -= 1
        counts["docs_dropped"]["no_tokens"] = counts["docs_dropped"].get("no_tokens", 0) + 1
    summaries = {(s["split"], s["shard"]): s for s in map(json.loads, read_lines(str(staging.work / "shard_summaries" / "part*.jsonl")))}
    splits: dict[str, SplitInfo] = {}
    tokens, masked, nsp_random = Counter(), Counter(), Counter()
    for split, n_shards in (("train", cfg.shards.train_shards), ("heldout", cfg.shards.heldout_shards)):
        infos = []
        for shard in range(n_shards):
            summary = summaries.get((split, shard))
            if summary is None:  # no instance hashed to this shard: an empty shard keeps the layout regular
                info = write_shard(staging.shards / split / shard_name(shard), [], vocab_size, cfg.shards.batch_rows,
                                   cfg.masking.policy in SPAN_BOUND_POLICIES)
                summary = {"rows": 0, "sha256": info.sha256, "tokens": 0, "masked_tokens": 0, "nsp_random": 0}
            infos.append(ShardInfo(path=f"{split}/{shard_name(shard)}", rows=summary["rows"], sha256=summary["sha256"]))
            tokens[split] += summary["tokens"]
            masked[split] += summary["masked_tokens"]
            nsp_random[split] += summary["nsp_random"]
        splits[split] = SplitInfo(rows=sum(i.rows for i in infos), tokens=tokens[split], shards=infos)
    instance_counts = {
        "instances": {s: splits[s].rows for s in SPLITS},
        "nsp_random": {s: nsp_random[s] for s in SPLITS},
        "tokens": sum(splits[s].tokens for s in SPLITS),
        "masked_tokens": sum(masked.values()),
    }
    return splits, {"random_buckets": buckets, **instance_counts}
