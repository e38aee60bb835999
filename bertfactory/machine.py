"""Which machine produced an output: CPU model and vendor, the CPUs the process may use, the instruction sets that
matter to the pinned kernels, the architecture. Stage stamps record it next to the code revision
(flows/stamps.py), so that a figure quoted from a run directory (scripts/readme_demo.py) names the machine that made
it: CPU timings, and fine-tuning scores between CPU vendors (docs/results.md, "Determinism"), depend on it.

    from bertfactory.machine import machine_description, render
    d = machine_description()  # {"cpu": "Intel(R) Xeon(R) Processor", "vendor": "GenuineIntel", "cpus": 2,
                               #  "isa": ["avx2", "avx512f", "amx"], "arch": "x86_64", "kernels": "avx2"}
    render(d)                  # "2 cores, Intel(R) Xeon(R) Processor (GenuineIntel, AVX-512 + AMX)"

No torch here: it is called from processes where torch must load after the kernel pin (bertfactory/cpu_kernels.py).
It never raises: what cannot be read is None.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

_ISA = ("avx2", "avx512f", "amx")  # what the kernel pin is about: AVX2 kernels, AVX-512 ones, oneDNN's AMX


def _cpuinfo(path: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (Linux); {} elsewhere or when unreadable."""
    fields: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break  # the first processor's block is enough
                    continue
                name, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(name.strip(), value.strip())
    except OSError:
        return {}
    return fields


def _cpus() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def machine_description(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """{"cpu", "vendor", "cpus", "isa", "arch", "kernels"}: the CPU model name and vendor (/proc/cpuinfo, else
    platform.processor()), the CPUs this process may run on (its affinity), which of avx2 / avx512f / amx the CPU
    flags name (None when there are no x86 flags to read), platform.machine(), and the ATen kernels the process was
    pinned to (ATEN_CPU_CAPABILITY; "native" when unpinned). Any field that cannot be read is None."""
    out: dict = {"cpu": None, "vendor": None, "cpus": None, "isa": None, "arch": None, "kernels": None}
    try:
        info = _cpuinfo(cpuinfo)
        out["cpu"] = info.get("model name") or platform.processor() or None
        out["vendor"] = info.get("vendor_id") or None
        if "flags" in info:  # x86 only (an ARM cpuinfo has "Features")
            flags = set(info["flags"].split())
            out["isa"] = [isa for isa in _ISA
                          if (any(f.startswith("amx") for f in flags) if isa == "amx" else isa in flags)]
    except Exception:  # noqa: BLE001 -- a description must never fail a stage
        pass
    for field, read in (("cpus", _cpus), ("arch", lambda: platform.machine() or None),
                        ("kernels", lambda: os.environ.get("ATEN_CPU_CAPABILITY") or "native")):
        try:
            out[field] = read()
        except Exception:  # noqa: BLE001
            pass
    return out


def render(description: dict | None) -> str:
    """One line: "2 cores, Intel(R) Xeon(R) Processor (GenuineIntel, AVX-512 + AMX)". The architecture is added
    when it is not x86-64, the kernels when they are not the pinned AVX2 ones; "machine not recorded" for None."""
    if not description:
        return "machine not recorded"
    try:
        cpus = description.get("cpus")
        head = f"{cpus} core{'' if cpus == 1 else 's'}" if cpus else "? cores"
        isa = description.get("isa")
        level = None
        if isa is not None:
            level = ("AVX-512" if "avx512f" in isa else "AVX2" if "avx2" in isa else "no AVX2")
            if "amx" in isa:
                level += " + AMX"
        arch = description.get("arch")
        kernels = description.get("kernels")
        details = [description.get("vendor"), level,
                   arch if arch and arch.lower() not in ("x86_64", "amd64") else None,
                   f"kernels: {kernels}" if kernels and kernels.lower() != "avx2" else None]
        details = [str(d) for d in details if d]
        return (f"{head}, {description.get('cpu') or 'unknown CPU'}"
                + (f" ({', '.join(details)})" if details else ""))
    except Exception:  # noqa: BLE001 -- a stamp edited by hand, a field of an unexpected type
        return "machine not readable"
