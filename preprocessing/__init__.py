"""Preprocessing stage: raw corpora -> cleaned documents -> tokenizer -> instances with precomputed masks ->
Arrow shards + manifest (the contract in `preprocessing.shards`, documented in docs/shards.md)."""
