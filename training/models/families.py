"""Imports every model module of the family so that each registers its architecture (see registry.py).
A new member adds its import here."""

from . import bert  # noqa: F401
