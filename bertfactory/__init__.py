"""bertfactory commons: the few pieces every stage shares (errors, atomic file I/O, strict config models,
real sample data). Stages import from here; this package imports no stage."""

__version__ = "0.1.0"
