"""A member of the family: model.py (its architecture, with torch) and settings.py (its configuration
and recipe settings, and its row `MEMBER`, without torch)."""
