"""The pinned CPU kernels (bertfactory/cpu_kernels.py): a process that imports bertfactory runs torch's AVX2 kernels
whatever the CPU, so that an AVX-512 machine computes what an AVX2-only machine computes.

The cross-machine claim is tested by playing the AVX2-only machine on this one (`ATEN_CPU_CAPABILITY=avx2` with
the pin switched off): a short fine-tuning of a tiny encoder there gives byte-identical weights to the pinned run,
and, where this CPU has AVX-512, torch's native choice gives other weights (what the pin prevents). Each run is a
fresh interpreter, since torch reads the variables once, when it loads."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertfactory.cpu_kernels import PINNED, SWITCH, describe, mkl_branch, parse_mkl_branch, pin_cpu_kernels

REPO = Path(__file__).resolve().parents[2]
FLAGS = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
VENDOR = next((line.split(":", 1)[1].strip() for line in FLAGS.splitlines() if line.startswith("vendor_id")), None)
HAS_AVX2 = " avx2" in FLAGS
HAS_AVX512 = " avx512f" in FLAGS

# 12 fine-tuning steps of a 2-layer BERT encoder + classification head (dropout on), 2 threads; prints a digest of
# the weights and the kernels torch used: scripts/cpu_fingerprint.py's, which compares machines with it
_spec = importlib.util.spec_from_file_location("cpu_fingerprint", REPO / "scripts" / "cpu_fingerprint.py")
cpu_fingerprint = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cpu_fingerprint)
FINETUNE = cpu_fingerprint.FINETUNE


# what torch hands to oneDNN rather than to ATen or MKL: nn.GELU on a contiguous tensor and the LSTM (the
# feature-based taggers' BiLSTM, evaluation/features.py); 10 AdamW steps, 1 thread; prints a digest of the weights
ONEDNN = """
import bertfactory, hashlib, torch
torch.set_num_threads(1)
torch.manual_seed(0)
lstm = torch.nn.LSTM(64, 32, bidirectional=True, batch_first=True)
ffn = torch.nn.Sequential(torch.nn.Linear(64, 176), torch.nn.GELU(), torch.nn.Linear(176, 21))
params = [*lstm.parameters(), *ffn.parameters()]
optimizer = torch.optim.AdamW(params, lr=1e-2)
for step in range(10):
    x = torch.randn(16, 40, 64, generator=torch.Generator().manual_seed(step))
    (lstm(x)[0].pow(2).mean() + ffn(x).logsumexp(-1).mean()).backward()
    optimizer.step()
    optimizer.zero_grad()
print(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in params)).hexdigest())
"""

AVX2_MACHINE = {"BERTFACTORY_CPU_KERNELS": "native", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                "ONEDNN_MAX_CPU_ISA": "AVX2"}


def _run(code: str, **env_changes: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in PINNED and k != SWITCH}
    env["PYTHONPATH"] = str(REPO)
    for name, value in env_changes.items():
        if value is not None:
            env[name] = value
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_pin_sets_only_what_the_user_left_unset():
    env = {"MKL_CBWR": "COMPATIBLE"}
    assert pin_cpu_kernels(env) == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE",
                                    "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert pin_cpu_kernels({SWITCH: "native"}) == {}
    with pytest.raises(ValueError, match="BERTFACTORY_CPU_KERNELS='avx512'.*'avx2'.*'native'"):
        pin_cpu_kernels({SWITCH: "avx512"})


@pytest.mark.skipif(not HAS_AVX2, reason="the pin concerns x86-64 CPUs with AVX2")
def test_importing_any_stage_pins_the_kernels_before_torch_loads():
    for package in ("flows", "training", "evaluation", "distillation"):
        assert _run(f"import {package}, torch; print(torch.backends.cpu.get_cpu_capability())") == ["AVX2"], package
    native = _run("import torch; print(torch.backends.cpu.get_cpu_capability())")
    assert _run("import flows, torch; print(torch.backends.cpu.get_cpu_capability())",
                BERTFACTORY_CPU_KERNELS="native") == native


@pytest.mark.skipif(not HAS_AVX2, reason="the pin concerns x86-64 CPUs with AVX2")
def test_fine_tuning_computes_what_an_avx2_machine_computes():
    pinned = _run(FINETUNE)
    # an AVX2-only machine: neither ATen, MKL nor oneDNN can dispatch AVX-512 there (without
    # MKL_ENABLE_INSTRUCTIONS, MKL on an AVX-512 machine still takes its AVX-512 GEMMs, which round otherwise:
    # seen on an AVX512-FP16 Xeon)
    avx2_machine = _run(FINETUNE, **AVX2_MACHINE)
    assert pinned[0] == avx2_machine[0] == "AVX2"
    assert pinned[1] == avx2_machine[1]
    assert _run(FINETUNE)[1] == pinned[1]  # and again, in another process
    if HAS_AVX512:  # what the pin prevents: this machine's own kernels round otherwise
        native = _run(FINETUNE, BERTFACTORY_CPU_KERNELS="native")
        assert native[0] in ("AVX512", "AVX512_BF16", "AVX512_VNNI", "AMX") or native[0].startswith("AVX512")
        assert native[1] != pinned[1]


@pytest.mark.skipif(not HAS_AVX2, reason="the pin concerns x86-64 CPUs with AVX2")
def test_gelu_and_lstm_compute_what_an_avx2_machine_computes():
    """oneDNN chooses its kernels by itself, whatever ATen and MKL were told: without its own cap, the LSTM and GELU
    ran AVX-512 kernels on an AVX512/AMX Xeon (ONEDNN_VERBOSE: jit:avx10_1_512_amx) and gave other weights."""
    pinned = _run(ONEDNN)
    assert pinned == _run(ONEDNN, **AVX2_MACHINE)
    if HAS_AVX512:  # the rest of the pin without oneDNN's cap: what it prevents
        assert _run(ONEDNN, ONEDNN_MAX_CPU_ISA="ALL") != pinned


def test_scripts_that_load_torch_at_import_import_bertfactory_first():
    """A benchmark or script run as `python benchmarks/x.py` imports no stage package before its own `import torch`
    unless it says so: torch loaded first keeps this machine's native kernels, and its figures would not be the
    pinned ones the project's other processes compute."""
    import ast

    late = []
    for path in sorted([*REPO.glob("benchmarks/*.py"), *REPO.glob("scripts/*.py")]):
        modules = []
        for node in ast.parse(path.read_text(encoding="utf-8")).body:  # module level only
            if isinstance(node, ast.Import):
                modules += [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules.append(node.module.split(".")[0])
        stages = {"bertfactory", "preprocessing", "training", "evaluation", "distillation", "flows"}
        if "torch" in modules and not stages & set(modules[:modules.index("torch")]):
            late.append(path.relative_to(REPO).as_posix())
    assert late == [], f"import bertfactory before torch in: {late}"


def test_the_mkl_branch_is_read_from_mkl_verbose_lines():
    line = ("MKL_VERBOSE SGEMM(N,N,16,16,16,0x7ffd,0x55a8,16,0x55a8,16,0x7ffd,0x55a8,16) 9.1us CNR:AUTO Dyn:0 "
            "FastMM:1 TID:0  NThr:1")
    assert parse_mkl_branch("MKL_VERBOSE oneMKL 2024.0 Update 2 Product build\n" + line) == "AUTO"
    assert parse_mkl_branch(line.replace("CNR:AUTO", "CNR:COMPATIBLE")) == "COMPATIBLE"
    assert parse_mkl_branch("no verbose output") is None


def test_doctor_warns_when_mkl_overrides_the_branch_asked_for(monkeypatch):
    monkeypatch.setenv("MKL_CBWR", "AVX2")
    overridden = describe(branch="AUTO")
    assert "MKL runs CNR:AUTO (MKL_CBWR=AVX2 not honoured on this CPU" in overridden
    assert "MKL_CBWR=COMPATIBLE is honoured on every CPU" in overridden
    assert describe(branch="AVX2").endswith("MKL runs CNR:AVX2")
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    assert describe(branch="COMPATIBLE").endswith("MKL runs CNR:COMPATIBLE")


@pytest.mark.skipif(not HAS_AVX2, reason="the pin concerns x86-64 CPUs with AVX2")
def test_mkl_reports_the_branch_it_runs():
    """MKL honours COMPATIBLE on every CPU; the pinned AVX2 branch on Intel CPUs, while on an AMD CPU it reports
    AUTO (measured on an AMD EPYC, MKL 2024.0): the reason `bertfactory doctor` warns there."""
    pinned = {**os.environ, **PINNED}
    assert mkl_branch({**pinned, "MKL_CBWR": "COMPATIBLE"}) == "COMPATIBLE"
    branch = mkl_branch(pinned)
    assert branch in ("AVX2", "AUTO"), branch
    if VENDOR == "AuthenticAMD":
        assert branch == "AUTO"


@pytest.mark.skipif(not HAS_AVX2, reason="the pin concerns x86-64 CPUs with AVX2")
def test_fingerprint_records_this_machine_and_compares_the_others(tmp_path):
    """scripts/cpu_fingerprint.py: each setting's digest is the fine-tuning run's own (the pinned one equals the
    digest of FINETUNE in a pinned process), MKL's COMPATIBLE branch computes other weights than the pinned branch,
    a rerun replaces this machine's entry, and another machine's entry reads same or other weights per setting."""
    record = tmp_path / "fingerprints.json"
    entry = cpu_fingerprint.fingerprint()
    pinned, compatible = entry["settings"]["pinned"], entry["settings"]["MKL_CBWR=COMPATIBLE"]
    assert pinned["digest"] == _run(FINETUNE)[1]
    assert compatible["mkl_branch"] == "COMPATIBLE" and compatible["env"]["MKL_CBWR"] == "COMPATIBLE"
    assert compatible["digest"] != pinned["digest"]
    assert entry["torch"] and entry["vendor"] == VENDOR
    cpu_fingerprint.record(entry, record)
    assert len(cpu_fingerprint.record(entry, record)) == 1
    other = {**entry, "cpu": "Another CPU", "vendor": "GenuineOther", "machine": "2 cores, Another CPU",
             "settings": {"pinned": {**pinned, "digest": "0" * 64}, "MKL_CBWR=COMPATIBLE": compatible}}
    machines = cpu_fingerprint.record(other, record)
    assert [m["cpu"] for m in machines] == [entry["cpu"], "Another CPU"]
    table = cpu_fingerprint.compare(entry, cpu_fingerprint.load(record))
    row = next(line for line in table.splitlines() if "Another CPU" in line)
    assert "000000000000: other weights" in row and f"{compatible['digest'][:12]}: **same weights**" in row
    record.write_text('{"machines": {}}')
    with pytest.raises(ValueError, match="not a cpu_fingerprints document of version 1"):
        cpu_fingerprint.load(record)
