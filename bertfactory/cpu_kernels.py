"""Pin the CPU kernels torch dispatches to, so that CPU results are the same on every x86-64 machine with AVX2.

torch picks its vectorised CPU kernels (softmax, LayerNorm, GELU, reductions, the optimisers' element-wise
arithmetic) for the widest instruction set the CPU has: AVX-512 on one machine, AVX2 on another. The two sum in
different orders, so the same fine-tuning run drifts apart by one rounding step (~1e-7) within a few steps, and by
the end of a run a tagging F1 or an accuracy can differ (measured: wnut16 entity F1 0.141 on one 2-core machine,
0.199 on another, at the same commit). Pinning ATen to its AVX2 kernels (`ATEN_CPU_CAPABILITY=avx2`), MKL to its
AVX2 code path (`MKL_CBWR=AVX2`, MKL's conditional numerical reproducibility) and oneDNN to its AVX2 kernels
(`ONEDNN_MAX_CPU_ISA=AVX2`: torch sends `nn.GELU` on contiguous tensors and the LSTM of the feature-based taggers
there, and oneDNN picks its own ISA, AVX-512 or AMX kernels on a Xeon that has them) makes an AVX-512 machine
compute what an AVX2-only Intel machine computes. Between an Intel and an AMD CPU the fine-tuning scores still
differed (docs/results.md, "Determinism", has the measurement and what is known of the cause).

What stays machine-dependent, and why (docs/results.md, "Determinism"): the thread count (ATen and MKL split reductions
by thread, so 1 and 2 threads differ in the last bit; recipes fix it with `evaluate.num_threads` /
`pretrain.num_threads`), the torch build, and CPUs without AVX2 (they run the default kernels).

The variables are read once, when torch loads, so this must run before the first `import torch` of the process:
`bertfactory/__init__.py` calls `pin_cpu_kernels()`, and every stage package (flows, training, evaluation,
distillation) imports `bertfactory` first. Child processes (torchrun ranks, Beam workers, Prefect runs) inherit
the variables. A variable the user set wins; `BERTFACTORY_CPU_KERNELS=native` leaves torch's own choice (the
fastest kernels of the machine, results tied to its instruction set).
"""

from __future__ import annotations

import os
from typing import MutableMapping

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
SWITCH = "BERTFACTORY_CPU_KERNELS"  # "avx2" (default) or "native"


def pin_cpu_kernels(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set the pinned variables the user has not set (unless BERTFACTORY_CPU_KERNELS=native) -> those in force."""
    choice = environ.get(SWITCH, "avx2").strip().lower()
    if choice == "native":
        return {}
    if choice != "avx2":
        raise ValueError(f"{SWITCH}={environ[SWITCH]!r}: expected 'avx2' (the default, the same results on every "
                         "x86-64 CPU with AVX2) or 'native' (the machine's fastest kernels)")
    for name, value in PINNED.items():
        environ.setdefault(name, value)
    return {name: environ[name] for name in PINNED}


def describe() -> str:
    """One line for `bertfactory doctor`: the kernels torch runs in this process and why."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    pinned = os.environ.get("ATEN_CPU_CAPABILITY")
    source = f"ATEN_CPU_CAPABILITY={pinned}" if pinned else f"{SWITCH}=native: the machine's widest"
    return (f"CPU kernels: {capability} ({source}; MKL_CBWR={os.environ.get('MKL_CBWR', 'unset')}, "
            f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', 'unset')})")


def match_inductor() -> None:
    """Before torch.compile on a pinned process: inductor's C++ code for the CPU uses the pinned vector width
    (cpp.simdlen 256 = AVX2). Left to choose on its own under the pin, it generated code whose first training step
    gave a NaN loss on this project's AVX-512 CPU (tests/training/test_compile.py), where simdlen 256 or 512 both
    match eager; 256 keeps the compiled arithmetic on the kernels the rest of the process runs."""
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "avx2":
        import torch._inductor.config as inductor

        inductor.cpp.simdlen = 256
