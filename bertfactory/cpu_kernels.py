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
differ: MKL honours `MKL_CBWR=AVX2` on Intel CPUs only; on an AMD CPU it reports `CNR:AUTO` and runs kernels of its
own choice, so its matrix products round otherwise. `mkl_branch()` reads the branch MKL actually took (`bertfactory
doctor` prints it); `MKL_CBWR=COMPATIBLE` is the branch every vendor's CPU honours (docs/results.md, "Determinism";
scripts/cpu_fingerprint.py compares machines).

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
import re
import subprocess
import sys
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


_CNR = re.compile(r"\bCNR:(\w+)")
# one small single-precision product: MKL_VERBOSE prints a line per MKL call, with the reproducibility branch in force
_PRODUCT = "import torch; torch.set_num_threads(1); a = torch.ones(16, 16); a @ a"


def parse_mkl_branch(verbose: str) -> str | None:
    """The branch an MKL_VERBOSE line reports (`CNR:AVX2`, `CNR:AUTO`, `CNR:COMPATIBLE`, `CNR:OFF`) -> "AVX2"...;
    None when no line names one."""
    match = _CNR.search(verbose)
    return match.group(1) if match else None


def mkl_branch(env: MutableMapping[str, str] | None = None, timeout: float = 120.0) -> str | None:
    """The reproducibility branch MKL takes in a process with this one's environment, read from MKL_VERBOSE in a
    child interpreter (the variables are read once, when MKL loads): "AVX2" where `MKL_CBWR=AVX2` is honoured,
    "AUTO" where MKL overrides it (on AMD CPUs; measured on an EPYC with MKL 2024.2), "COMPATIBLE", "OFF". None when
    it cannot be read (torch without MKL, a failed child). About a second: for `bertfactory doctor`, not for stages.
    `env`: the child's environment instead of this process's (scripts/cpu_fingerprint.py tries several)."""
    try:
        out = subprocess.run([sys.executable, "-c", _PRODUCT], env={**(os.environ if env is None else env),
                                                                     "MKL_VERBOSE": "1"},
                             capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_mkl_branch(out.stdout + out.stderr) if out.returncode == 0 else None


def describe(branch: str | None = None) -> str:
    """One line for `bertfactory doctor`: the kernels torch runs in this process and why, and the MKL branch in force
    (`branch`, else read by mkl_branch()); a warning when MKL overrides the branch asked for, the case that makes an
    AMD CPU's results differ from an Intel CPU's."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    pinned = os.environ.get("ATEN_CPU_CAPABILITY")
    source = f"ATEN_CPU_CAPABILITY={pinned}" if pinned else f"{SWITCH}=native: the machine's widest"
    asked = os.environ.get("MKL_CBWR")
    line = (f"CPU kernels: {capability} ({source}; MKL_CBWR={asked or 'unset'}, "
            f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', 'unset')})")
    if not torch.backends.mkl.is_available():
        return line
    branch = branch or mkl_branch()
    if branch is None:
        return line + "; MKL branch not readable"
    line += f"; MKL runs CNR:{branch}"
    if asked and asked.upper() != branch.upper() and branch.upper() in ("AUTO", "OFF"):
        line += (f" (MKL_CBWR={asked} not honoured on this CPU: its matrix products can round otherwise than an "
                 "Intel CPU's, and fine-tuning scores with them; MKL_CBWR=COMPATIBLE is honoured on every CPU, at "
                 "1.8-2.6x the time per product)")
    return line


def match_inductor() -> None:
    """Before torch.compile on a pinned process: inductor's C++ code for the CPU uses the pinned vector width
    (cpp.simdlen 256 = AVX2). Left to choose on its own under the pin, it generated code whose first training step
    gave a NaN loss on this project's AVX-512 CPU (tests/training/test_compile.py), where simdlen 256 or 512 both
    match eager; 256 keeps the compiled arithmetic on the kernels the rest of the process runs."""
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "avx2":
        import torch._inductor.config as inductor

        inductor.cpp.simdlen = 256
