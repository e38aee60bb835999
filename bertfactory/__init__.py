"""bertfactory commons: the few pieces every stage shares (errors, atomic file I/O, strict config models,
real sample data). Stages import from here; this package imports no stage."""

__version__ = "0.1.0"

# before any torch import of the process: the same CPU kernels on every x86-64 machine (cpu_kernels.py says why)
from .cpu_kernels import pin_cpu_kernels as _pin_cpu_kernels  # noqa: E402

_pin_cpu_kernels()
