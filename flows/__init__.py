import bertfactory  # noqa: F401  (first: pins torch's CPU kernels before torch loads, bertfactory/cpu_kernels.py)
