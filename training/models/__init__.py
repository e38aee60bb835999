"""Model family: core/ (the shared encoder core and the torch-free schemas), a folder per member (model.py with torch,
settings.py without: its config / recipe settings and its row `MEMBER`), members.py (the list, and every table built
from the rows, without torch) and registry.py (the architectures, importing the models)."""
