"""Downstream tasks: each module reads its data into a `TaskData` (train/dev/test examples + provenance)."""
