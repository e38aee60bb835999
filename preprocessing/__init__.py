"""Preprocessing stage: raw corpora -> cleaned documents -> tokenizer -> instances with precomputed masks ->
Arrow shards + manifest (the contract in `preprocessing.shards`, documented in docs/shards.md)."""

from .quiet_beam_import import install as _quiet_beam_import

_quiet_beam_import()  # before any module of this package imports Beam (preprocessing/quiet_beam_import.py)
