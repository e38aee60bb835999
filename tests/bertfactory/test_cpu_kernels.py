"""The pinned CPU kernels (bertfactory/cpu_kernels.py): a process that imports bertfactory runs torch's AVX2 kernels
whatever the CPU, so that an AVX-512 machine computes what an AVX2-only machine computes.

The cross-machine claim is tested by playing the AVX2-only machine on this one (`ATEN_CPU_CAPABILITY=avx2` with
the pin switched off): a short fine-tuning of a tiny encoder there gives byte-identical weights to the pinned run,
and, where this CPU has AVX-512, torch's native choice gives other weights (what the pin prevents). Each run is a
fresh interpreter, since torch reads the variables once, when it loads."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertfactory.cpu_kernels import PINNED, SWITCH, pin_cpu_kernels

REPO = Path(__file__).resolve().parents[2]
FLAGS = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
HAS_AVX2 = " avx2" in FLAGS
HAS_AVX512 = " avx512f" in FLAGS

# 12 fine-tuning steps of a 2-layer BERT encoder + classification head (dropout on), 2 threads; prints a digest of
# the weights and the kernels torch used
FINETUNE = """
import bertfactory, hashlib, torch
from training.models.bert.model import BertConfig, BertModel
from evaluation.heads import TaskModel
torch.set_num_threads(2)
torch.manual_seed(0)
encoder = BertModel(BertConfig(vocab_size=500, hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128,
                               max_position_embeddings=64))
model = TaskModel(encoder, "classification", 3, 0.1)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6, fused=True)
for step in range(12):
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(5, 500, (16, 48), generator=g)
    mask = torch.ones(16, 48, dtype=torch.bool)
    mask[:, 40:] = False
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask,
             "labels": torch.randint(0, 3, (16,), generator=g)}
    model.loss(model(batch), batch).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values())).hexdigest()
print(torch.backends.cpu.get_cpu_capability(), digest)
"""


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
