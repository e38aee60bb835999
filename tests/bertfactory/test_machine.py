"""bertfactory.machine: what a stage stamp records of the machine that made a result (CPU model, vendor, cores,
instruction sets), read without torch and without ever raising; and its one-line rendering for the README."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bertfactory import machine
from bertfactory.machine import machine_description, render

REPO = Path(__file__).resolve().parents[2]
FIELDS = {"cpu", "vendor", "cpus", "isa", "arch", "kernels"}

INTEL = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: another model, never read
"""
AMD = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13 64-Core Processor
flags\t\t: fpu sse2 avx avx2 fma
"""
ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes
CPU implementer\t: 0x41
"""


def test_this_machine_is_described_without_importing_torch():
    code = ("import json, sys; from bertfactory.machine import machine_description, render; "
            "d = machine_description(); print(json.dumps({'d': d, 'line': render(d), "
            "'torch': 'torch' in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["torch"] is False
    d = found["d"]
    assert set(d) == FIELDS
    assert isinstance(d["cpus"], int) and d["cpus"] >= 1 and d["arch"]
    assert found["line"].startswith(f"{d['cpus']} core")
    assert json.loads(json.dumps(d)) == d  # JSON-able as it is


def test_fields_are_read_from_cpuinfo(tmp_path):
    for text, cpu, vendor, isa in ((INTEL, "Intel(R) Xeon(R) Processor", "GenuineIntel", ["avx2", "avx512f", "amx"]),
                                   (AMD, "AMD EPYC 7B13 64-Core Processor", "AuthenticAMD", ["avx2"])):
        (tmp_path / "cpuinfo").write_text(text)
        d = machine_description(tmp_path / "cpuinfo")
        assert (d["cpu"], d["vendor"], d["isa"]) == (cpu, vendor, isa)


def test_what_cannot_be_read_is_none(tmp_path, monkeypatch):
    monkeypatch.setattr(machine.platform, "processor", lambda: "")
    (tmp_path / "cpuinfo").write_text(ARM)
    d = machine_description(tmp_path / "cpuinfo")
    assert d["cpu"] is None and d["vendor"] is None and d["isa"] is None  # no x86 flags: no ISA claimed
    d = machine_description(tmp_path / "missing")
    assert set(d) == FIELDS and d["cpu"] is None and d["isa"] is None
    monkeypatch.setattr(machine.platform, "processor", lambda: "arm")  # a Mac: no /proc/cpuinfo
    assert machine_description(tmp_path / "missing")["cpu"] == "arm"


def test_it_never_raises(tmp_path, monkeypatch):
    def boom(*args):
        raise RuntimeError("unreadable")

    monkeypatch.setattr(machine, "_cpuinfo", boom)
    monkeypatch.setattr(machine, "_cpus", boom)
    monkeypatch.setattr(machine.platform, "machine", boom)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # the pin (already so unless BERTFACTORY_CPU_KERNELS=native)
    d = machine_description()
    assert set(d) == FIELDS and d["cpu"] is None and d["cpus"] is None and d["arch"] is None
    assert d["kernels"] == "avx2" and render(d) == "? cores, unknown CPU"
    assert render("a string where a stamp had a dict") == "machine not readable"


def test_rendering():
    intel = {"cpu": "Intel(R) Xeon(R) Processor", "vendor": "GenuineIntel", "cpus": 2,
             "isa": ["avx2", "avx512f", "amx"], "arch": "x86_64", "kernels": "avx2"}
    assert render(intel) == "2 cores, Intel(R) Xeon(R) Processor (GenuineIntel, AVX-512 + AMX)"
    amd = {**intel, "cpu": "AMD EPYC 7B13 64-Core Processor", "vendor": "AuthenticAMD", "isa": ["avx2"]}
    assert render(amd) == "2 cores, AMD EPYC 7B13 64-Core Processor (AuthenticAMD, AVX2)"
    assert render({**amd, "cpus": 1, "kernels": "native"}) == \
        "1 core, AMD EPYC 7B13 64-Core Processor (AuthenticAMD, AVX2, kernels: native)"
    arm = {"cpu": None, "vendor": None, "cpus": 4, "isa": None, "arch": "aarch64", "kernels": "avx2"}
    assert render(arm) == "4 cores, unknown CPU (aarch64)"
    assert render(None) == render({}) == "machine not recorded"
