"""benchmarks/gpu_step.py without a GPU, so that the script cannot rot where CI has none (runs everywhere, no
`cuda` marker): its arguments and cases, the peak table by device name, the MFU and the results table, the
message it exits with when torch sees no CUDA device, one real step of both implementations (ours and
transformers') through its measurement function on the CPU at a tiny shape, and --all's case list (ModernBERT-base
and BERT-base, ours eager / ours compiled (ModernBERT also unpadded) / transformers) at tiny shapes on the CPU with
its goals table (the compiled implementations under the slow mark: inductor on the CPU)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_step():
    spec = importlib.util.spec_from_file_location("gpu_step", REPO / "benchmarks" / "gpu_step.py")
    module = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    try:
        spec.loader.exec_module(module)  # it puts benchmarks/ on sys.path for pretrain_step
    finally:
        sys.path[:] = path
    return module


def test_arguments_and_cases(gpu_step):
    args = gpu_step.parse_args([])
    assert gpu_step.cases(args) == [("base", 128, 64, 20), ("base", 512, 16, 80), ("large", 128, 64, 20),
                                    ("large", 512, 16, 80)]  # 8,192 tokens a step, BERT's prediction budgets
    args = gpu_step.parse_args(["--shape", "large", "--seq", "512", "--batch", "8", "--peak-tflops", "500"])
    assert gpu_step.cases(args) == [("large", 512, 8, 80)] and args.peak_tflops == 500
    for bad in (["--seq", "256"], ["--shape", "huge"], ["--batch", "0"], ["--peak-tflops", "-1"]):
        with pytest.raises(SystemExit):
            gpu_step.parse_args(bad)


@pytest.mark.parametrize("name, label, tflops", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", 989.4),
    ("NVIDIA H100 PCIe", "H100 PCIe", 756.0),
    ("NVIDIA H100 NVL", "H100 NVL", 835.0),
    ("NVIDIA H200", "H200 SXM", 989.4),
    ("NVIDIA H200 NVL", "H200 NVL", 835.0),
    ("NVIDIA GH200 480GB", "GH200", 989.4),
    ("NVIDIA A100-SXM4-80GB", "A100", 312.0),
    ("NVIDIA A100 80GB PCIe", "A100", 312.0),
    ("NVIDIA L4", "L4", 121.0),
    ("NVIDIA L40S", "L40S", 362.0),
    ("NVIDIA L40", "L40", 181.0),
    ("NVIDIA A10", "A10", 125.0),
    ("NVIDIA B200", "B200", 2250.0),
    ("NVIDIA GeForce RTX 4090", "RTX 4090", 165.2),
])
def test_peak_table_by_device_name(gpu_step, name, label, tflops):
    assert gpu_step.peak_for(name) == (label, pytest.approx(tflops * 1e12))


def test_unknown_gpus_need_the_flag_and_the_flag_wins(gpu_step):
    assert gpu_step.peak_for("NVIDIA A10G") is None and gpu_step.peak_for("Tesla V100-SXM2-16GB") is None
    label, peak = gpu_step.resolve_peak("NVIDIA A10G", None)
    assert peak is None and "--peak-tflops" in label
    assert gpu_step.resolve_peak("NVIDIA H100 80GB HBM3", 500.0)[1] == pytest.approx(500e12)


def test_mfu_and_the_results_table(gpu_step):
    rows = [{"shape": "base", "seq_len": 128, "batch": 64, "impl": impl, "runs": runs, "peak_gpu_mib": memory,
             "flops_per_token": 5e8, "dense_flops_per_token": 6e8}
            for impl, runs, memory in (("ours", [3.0e5, 2.0e5, 2.5e5], [4096.0, 4096.0, 4100.0]),
                                       ("hf", [1.0e5, 1.2e5, 1.5e5], [8192.0, 8192.0, 8192.0]))]
    assert gpu_step.mfu(2.5e5, 5e8, 1e15) == pytest.approx(0.125)
    assert gpu_step.mfu(2.5e5, 5e8, None) is None
    table = gpu_step.format_table(rows, 1e15).splitlines()
    assert table[0].split()[:7] == ["shape", "seq", "batch", "impl", "tokens/s", "MFU", "peak"]
    assert table[1].split()[:7] == ["base", "128", "64", "ours", "250,000", "12.5", "%"]  # the median, its MFU
    assert table[1].split()[7] == "4.00"  # GiB, the largest round
    assert table[2].split()[:6] == ["base", "128", "64", "hf", "120,000", "6.0"]
    assert "0.500 G credited" in table[3] and "0.600 G with logits at every position" in table[3]
    assert "ours / HF 2.08x tokens/s, 0.50x peak memory" in table[3]
    assert "n/a" in gpu_step.format_table(rows, None).splitlines()[1]


def test_without_cuda_it_exits_with_a_message(gpu_step, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="sees no CUDA device; this benchmark measures a GPU step"):
        gpu_step.main([])


def test_one_step_of_each_implementation_through_the_measurement(gpu_step, one_thread):
    tiny = (32, 1, 2, 64, 200)  # hidden, layers, heads, FFN, vocab
    ours = gpu_step.measure("ours", tiny, 32, 2, 4, steps=1, warmup=0, device="cpu")
    hf = gpu_step.measure("hf", tiny, 32, 2, 4, steps=1, warmup=0, device="cpu")
    for result in (ours, hf):
        assert result["tokens_per_s"] > 0 and result["peak_gpu_mib"] is None and result["attention"] == "sdpa"
    assert ours["parameters"] == hf["parameters"]  # the same architecture on both sides
    with pytest.raises(ValueError, match="impl must be"):
        gpu_step.measure("other", tiny, 32, 2, 4, steps=1, warmup=0, device="cpu")


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_all_cases_and_goals(gpu_step):
    args = gpu_step.parse_args(["--all"])
    assert args.all and args.windows == 3 and args.compile_mode == "default"
    assert [(c[0], c[2], c[3], c[5]) for c in gpu_step.ALL_CASES] == [
        ("modernbert-base", 1024, 24, 0.40), ("bert-base", 128, 256, 0.45), ("bert-base", 128, 64, 0.35)]
    assert gpu_step.CASE_IMPLS == {"bert": ("ours", "ours-compiled", "hf"),
                                   "modernbert": ("ours", "ours-compiled-unpad", "ours-compiled-fixed", "hf")}
    assert set(gpu_step.ALL_IMPLS) == {i for impls in gpu_step.CASE_IMPLS.values() for i in impls}
    for bad in (["--all", "--windows", "2"], ["--all", "--window-steps", "0"], ["--compile-mode", "fast"]):
        with pytest.raises(SystemExit):
            gpu_step.parse_args(bad)


def _tiny_all(gpu_step, impls, windows=3):
    """The --all case list at tiny shapes on the CPU (the GPU's cases, a few rows of 32 tokens)."""
    rows = []
    for index, (label, *_, goal) in enumerate(gpu_step.ALL_CASES):
        shape = gpu_step.case_shape(index, tiny=True)  # a batch per case: the table groups by case
        family, dims, batch = shape["family"], shape["dims"], shape["batch"]
        credited, _ = gpu_step.case_flops(family, dims, 32, 4, local_attention=8)
        for impl in impls:
            measured = gpu_step.measure_case(impl, family, dims, 32, batch, 4, warmup=1, windows=windows,
                                             window_steps=1, device="cpu", local_attention=8)
            rows.append({"label": label, "seq_len": 32, "batch": batch, "flops_per_token": credited,
                         "mfu_goal": goal, **measured})
    return rows


def test_the_all_case_list_runs_at_a_tiny_shape_on_the_cpu(gpu_step, one_thread):
    rows = _tiny_all(gpu_step, ("ours", "hf"))
    assert len(rows) == 6
    for row in rows:
        assert len(row["windows"]) == 3 and row["tokens_per_s"] == sorted(row["windows"])[1]
        assert row["peak_gpu_mib"] is None and row["attention"] == "sdpa"
    for ours, hf in zip(rows[::2], rows[1::2]):
        assert ours["parameters"] == hf["parameters"], (ours["label"], ours["parameters"], hf["parameters"])
    with pytest.raises(ValueError, match="impl must be"):
        gpu_step.measure_case("other", "bert", gpu_step.TINY_DIMS["bert"], 32, 2, 4, 0, 3, 1, device="cpu")

    compiled = [{**row, "impl": "ours-compiled", "tokens_per_s": 2 * row["tokens_per_s"]} for row in rows[::2]]
    unpadded = [{**rows[0], "impl": "ours-compiled-unpad", "tokens_per_s": 3 * rows[0]["tokens_per_s"]},
                {**rows[0], "impl": "ours-compiled-fixed", "tokens_per_s": 4 * rows[0]["tokens_per_s"]}]
    table = gpu_step.format_all_table(rows + compiled + unpadded, 1e9).splitlines()
    assert table[0].split()[:6] == ["case", "seq", "batch", "impl", "tokens/s", "MFU"]
    # ModernBERT's goal on each of its compiled rows
    assert sum(">= 45 %" in line for line in table) == 1 and sum(">= 40 %" in line for line in table) == 3
    summary = [line for line in table if "ours-compiled / HF" in line]
    assert len(summary) == 3 and all("ours-compiled / eager 2.00x" in line and "goal >= 1.5x" in line
                                     for line in summary)
    assert "ours-compiled-unpad / eager 3.00x" in summary[0] and "ours-compiled-unpad / HF" in summary[0]
    assert "ours-compiled-fixed / eager 4.00x" in summary[0] and "ours-compiled-fixed / HF" in summary[0]
    assert not any("unpad" in line or "fixed" in line for line in summary[1:])


@pytest.mark.slow
def test_the_compiled_implementation_runs_on_the_cpu(gpu_step, one_thread):
    # inductor on the CPU (~60 s cold on the shared 2-core machine): the --all case's compiled step is real code
    (row,) = [m for m in (gpu_step.measure_case("ours-compiled", "bert", gpu_step.TINY_DIMS["bert"], 32, 2, 4,
                                                  warmup=1, windows=3, window_steps=1, device="cpu"),)]
    assert row["tokens_per_s"] > 0 and len(row["windows"]) == 3
    import torch._dynamo

    torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["ours-compiled-unpad", "ours-compiled-fixed"])
def test_the_unpadded_compiled_modernbert_runs_on_the_cpu(gpu_step, one_thread, impl):
    # ModernBERT's recipe step (compile + static_shapes + unpad, packed or fixed layout) through the reference
    # attention on the CPU; the varlen kernel itself is CUDA's (tests/gpu/test_modernbert_cuda.py)
    row = gpu_step.measure_case(impl, "modernbert", gpu_step.TINY_DIMS["modernbert"], 32, 2, 4,
                                warmup=1, windows=3, window_steps=1, device="cpu", local_attention=8)
    assert row["impl"] == impl and row["tokens_per_s"] > 0 and len(row["windows"]) == 3
    import torch._dynamo

    torch._dynamo.reset()


def test_other_compile_modes_leave_the_unpadded_row_out(gpu_step, monkeypatch):
    import json
    from types import SimpleNamespace

    measured = []

    def fake_run(command, **kwargs):
        measured.append(command[command.index("--worker") + 1])
        row = {"impl": measured[-1], "attention": "sdpa", "windows": [1.0, 2.0, 3.0], "tokens_per_s": 2.0,
               "warmup_s": 0.5, "peak_gpu_mib": None, "parameters": 7}
        return SimpleNamespace(returncode=0, stdout=json.dumps(row) + "\n", stderr="")

    monkeypatch.setattr(gpu_step.subprocess, "run", fake_run)
    gpu_step.run_all(gpu_step.parse_args(["--all", "--compile-mode", "reduce-overhead", "--prewarm-jobs", "0"]))
    # the packed layout reads the host and changes shape; the fixed one is what CUDA graphs can replay
    assert "ours-compiled-unpad" not in measured and "ours-compiled-fixed" in measured and len(measured) == 9
    measured.clear()
    gpu_step.run_all(gpu_step.parse_args(["--all", "--prewarm-jobs", "0"]))
    assert measured[:4] == ["ours", "ours-compiled-unpad", "ours-compiled-fixed", "hf"] and len(measured) == 10


def test_all_asks_every_worker_of_ours_for_its_profile(gpu_step, monkeypatch):
    import json
    from types import SimpleNamespace

    commands = []

    def fake_run(command, **kwargs):
        commands.append(command)
        impl = command[command.index("--worker") + 1]
        row = {"impl": impl, "attention": "sdpa", "windows": [1.0, 2.0, 3.0], "tokens_per_s": 2.0, "warmup_s": 0.5,
               "peak_gpu_mib": None, "parameters": 7}
        if "--profile-steps" in command:
            row["profile"] = {"steps": 3, "clock": "device", "ms_per_step": 2.0, "kinds": {"matmul": 1.0},
                              "top": [["gemm", 2.0, 1.0]]}
        return SimpleNamespace(returncode=0, stdout=json.dumps(row) + "\n", stderr="")

    monkeypatch.setattr(gpu_step.subprocess, "run", fake_run)
    rows, _ = gpu_step.run_all(gpu_step.parse_args(["--all", "--profile-steps", "3", "--prewarm-jobs", "0"]))
    for command, row in zip(commands, rows):
        impl = command[command.index("--worker") + 1]
        assert ("--profile-steps" in command) == impl.startswith("ours") == ("profile" in row)


@pytest.mark.parametrize("name, kind", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "matmul"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>", "matmul"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "matmul"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>, true>", "attention"),
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80", "attention"),
    ("triton_per_fused_native_layer_norm_native_layer_norm_backward_3",
     "triton (inductor's fused element-wise and reductions)"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
     "optimizer and clipping"),
    ("Memcpy HtoD (Pageable -> Device)", "copies and fills"),
    ("aten::mm", "matmul"),
    ("aten::gelu_backward", "other element-wise and reductions"),
])
def test_kernels_are_sorted_into_kinds_of_work(gpu_step, name, kind):
    assert gpu_step.kernel_kind(name) == kind


def test_a_profiled_measurement_says_where_the_step_time_goes(gpu_step, one_thread):
    row = gpu_step.measure_case("ours", "bert", gpu_step.TINY_DIMS["bert"], 32, 2, 4, warmup=1, windows=3,
                                window_steps=1, device="cpu", profile_steps=2)
    profile = row["profile"]
    assert profile["steps"] == 2 and profile["clock"] == "cpu" and profile["ms_per_step"] > 0
    assert sum(profile["kinds"].values()) == pytest.approx(1.0) and profile["kinds"]["matmul"] > 0
    names = [name for name, _, _ in profile["top"]]
    assert "aten::mm" in names and len(names) <= 25
    assert [ms for _, ms, _ in profile["top"]] == sorted((ms for _, ms, _ in profile["top"]), reverse=True)
    text = gpu_step.format_profile({**row, "label": "bert-base", "seq_len": 32, "batch": 2}).splitlines()
    assert text[0].startswith("  profile of bert-base 32 x 2 ours:") and "matmul" in text[0] and len(text) == 13
    assert "profile" not in gpu_step.measure_case("ours", "bert", gpu_step.TINY_DIMS["bert"], 32, 2, 4, warmup=0,
                                                  windows=3, window_steps=1, device="cpu")
    with pytest.raises(SystemExit):
        gpu_step.parse_args(["--all", "--profile-steps", "-1"])


def test_a_failing_profiler_keeps_the_measured_row(gpu_step, one_thread, monkeypatch):
    import torch.profiler

    class Broken:
        def __init__(self, **kwargs):
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(torch.profiler, "profile", Broken)
    row = gpu_step.measure_case("ours", "bert", gpu_step.TINY_DIMS["bert"], 32, 2, 4, warmup=0, windows=3,
                                window_steps=1, device="cpu", profile_steps=2)
    assert row["tokens_per_s"] > 0 and "profile" not in row
    assert row["profile_error"] == "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"


def test_a_failed_measurement_leaves_the_others_and_rows_are_kept_as_measured(gpu_step, monkeypatch, tmp_path):
    # a lent GPU's minutes are few: one failing or hanging worker must not cost the rest of the table
    import json
    import subprocess
    from types import SimpleNamespace

    def fake_run(command, **kwargs):
        impl, case = command[command.index("--worker") + 1], int(command[command.index("--worker-case") + 1])
        if impl == "ours-compiled" and case == 2:
            return SimpleNamespace(returncode=1, stdout="", stderr="inductor: something broke")
        if impl == "hf" and case == 0:
            raise subprocess.TimeoutExpired(command, kwargs["timeout"])
        row = {"impl": impl, "attention": "sdpa", "windows": [1.0, 2.0, 3.0], "tokens_per_s": 2.0 + case,
               "warmup_s": 0.5, "peak_gpu_mib": 1024.0, "parameters": 7}
        return SimpleNamespace(returncode=0, stdout="log line\n" + json.dumps(row) + "\n", stderr="")

    monkeypatch.setattr(gpu_step.subprocess, "run", fake_run)
    out = tmp_path / "rows.jsonl"
    args = gpu_step.parse_args(["--all", "--json", str(out), "--worker-timeout", "5", "--prewarm-jobs", "0"])
    rows, failures = gpu_step.run_all(args)
    assert len(rows) == 8 and len(failures) == 2  # 4 + 3 + 3 measurements
    assert "modernbert-base 1024 x 24 hf: no result within --worker-timeout 5 s" in failures[0]
    assert "bert-base 128 x 64 ours-compiled: exit 1" in failures[1] and "something broke" in failures[1]
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["label"], r["batch"], r["impl"]) for r in kept] == [(r["label"], r["batch"], r["impl"]) for r in rows]
    table = gpu_step.format_all_table(rows, 1e15)  # the table still prints with the holes
    assert "ours-compiled / HF" in table and "n/a" not in table.splitlines()[1]


def _fake_worker(calls, fail_warm=()):
    """A stand-in for subprocess.run of gpu_step's workers, recording (impl, case, warm-only) per call."""
    import json
    from types import SimpleNamespace

    def fake_run(command, **kwargs):
        impl, case = command[command.index("--worker") + 1], int(command[command.index("--worker-case") + 1])
        warm = "--warm-only" in command
        calls.append((impl, case, warm))
        assert kwargs["env"]["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "1" and kwargs["env"]["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "1"
        if warm and (impl, case) in fail_warm:
            return SimpleNamespace(returncode=1, stdout="", stderr="out of memory")
        row = ({"impl": impl, "warmup_s": 40.0 + case, "compile_cache": {}} if warm else
               {"impl": impl, "attention": "sdpa", "windows": [1.0, 2.0, 3.0], "tokens_per_s": 2.0, "warmup_s": 0.5,
                "peak_gpu_mib": None, "parameters": 7})
        return SimpleNamespace(returncode=0, stdout=json.dumps(row) + "\n", stderr="")
    return fake_run


def test_the_compiled_rows_are_compiled_first_and_together(gpu_step, monkeypatch):
    calls = []
    monkeypatch.setattr(gpu_step.subprocess, "run", _fake_worker(calls))
    rows, failures = gpu_step.run_all(gpu_step.parse_args(["--all"]))
    assert not failures and len(rows) == 10
    warm = [(impl, case) for impl, case, is_warm in calls if is_warm]
    # every compiled measurement is warmed, before any measurement, and nothing else is
    assert sorted(warm) == sorted((r["impl"], case) for case, r in zip([0, 0, 0, 0, 1, 1, 1, 2, 2, 2], rows)
                                  if r["impl"] in gpu_step.COMPILED_IMPLS)
    assert len(warm) == 4 and all(is_warm for *_, is_warm in calls[:4])
    assert [r.get("prewarm_s") is not None for r in rows] == [r["impl"] in gpu_step.COMPILED_IMPLS for r in rows]
    table = gpu_step.format_all_table(rows, 1e15).splitlines()
    assert "prewarm s" in table[0] and "40.0" in table[2]  # the unpadded ModernBERT row: cold warm-up of case 0

    calls.clear()
    gpu_step.run_all(gpu_step.parse_args(["--all", "--prewarm-jobs", "0"]))
    assert not any(is_warm for *_, is_warm in calls) and len(calls) == 10


def test_a_failed_prewarm_leaves_its_measurement_to_compile(gpu_step, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(gpu_step.subprocess, "run", _fake_worker(calls, fail_warm={("ours-compiled", 1)}))
    rows, failures = gpu_step.run_all(gpu_step.parse_args(["--all"]))
    assert not failures and len(rows) == 10
    row = next(r for r in rows if r["impl"] == "ours-compiled" and r["batch"] == 256)
    assert "prewarm_s" not in row and row["tokens_per_s"] == 2.0
    assert "prewarm of bert-base 128 x 256 ours-compiled failed (its measurement compiles for itself)" in \
        capsys.readouterr().out
    with pytest.raises(SystemExit):
        gpu_step.parse_args(["--all", "--prewarm-jobs", "-1"])


@pytest.mark.slow
def test_a_prewarmed_measurement_loads_its_graphs_from_the_cache(gpu_step, monkeypatch, tmp_path):
    # the real subprocesses at a tiny shape on the CPU (inductor's C++ kernels; ~1 min cold): the warm-only worker
    # compiles into a fresh cache directory, the measurement that follows hits that cache and compiles nothing
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    args = gpu_step.parse_args(["--all", "--worker-tiny", "--warmup", "1", "--window-steps", "1",
                                "--worker-timeout", "600"])
    warmed = gpu_step.prewarm(args, [(1, "ours-compiled"), (1, "hf")])
    assert list(warmed) == [(1, "ours-compiled")]  # transformers' eager step has nothing to compile
    cold = warmed[(1, "ours-compiled")]["compile_cache"]
    assert cold["fx_graph_misses"] > 0 and cold["fx_graph_hits"] == 0, cold
    row, error = gpu_step.run_worker(args, 1, "ours-compiled")
    assert error is None, error
    assert row["compile_cache"]["fx_graph_hits"] == cold["fx_graph_misses"], (row["compile_cache"], cold)
    assert row["compile_cache"]["fx_graph_misses"] == 0 and row["tokens_per_s"] > 0, row


def test_the_rows_of_a_run_become_the_results_tables(gpu_step, monkeypatch, tmp_path, capsys):
    # what a lent GPU's session pastes into RESULTS.md, made from --all's --json file by the script itself
    calls = []
    monkeypatch.setattr(gpu_step.subprocess, "run", _fake_worker(calls))
    out = tmp_path / "rows.jsonl"
    rows, _ = gpu_step.run_all(gpu_step.parse_args(["--all", "--json", str(out)]))
    import json

    kept = [json.loads(line) for line in out.read_text().splitlines()]
    kept[1]["profile"] = {"steps": 3, "clock": "device", "ms_per_step": 40.0, "kinds": {"matmul": 0.6, "attention": 0.4},
                          "top": [["sm90_xmma_gemm_bf16", 20.0, 72.0], ["flash_fwd_kernel", 16.0, 22.0]]}
    for row in kept:
        row["device_name"] = "NVIDIA H200"
        row["tokens_per_s"] = 1e5 if row["impl"] == "ours" else (3e5 if row["impl"] in gpu_step.COMPILED_IMPLS else 2e5)
        row["peak_gpu_mib"] = 2048.0 if row["impl"] == "hf" else 1024.0
    out.write_text("".join(json.dumps(row) + "\n" for row in kept))
    capsys.readouterr()
    gpu_step.main(["--markdown", str(out)])
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "Device: NVIDIA H200; peak H200 SXM = 989.4 TFLOP/s dense bf16", lines[0]
    table = [line for line in lines if line.startswith("| ") and not line.startswith("| ms")]
    assert table[0].startswith("| case | impl | tokens/s | MFU | goal |") and len(table) == 1 + 10 + 2  # + kernels
    first = table[1].split(" | ")
    assert first[0] == "| modernbert-base 1,024 x 24 (24,576 tokens)" and first[1] == "ours" and first[2] == "100,000"
    mfu = 100 * gpu_step.mfu(3e5, kept[1]["flops_per_token"], 989.4e12)
    assert f"| ours-compiled-unpad | 300,000 | {mfu:.1f} % | >= 40 % NOT met | 1.00 |" in text
    assert table[2].startswith("|  | ours-compiled-unpad | ")  # the case named once, on its first row
    ratios = [line for line in lines if line.startswith("- ")]
    assert len(ratios) == 3 and "ours-compiled-fixed: 3.00x eager, **1.50x** transformers (goal >= 1.5x met), " \
        "0.50x its peak memory" in ratios[0]
    assert "ours-compiled-unpad 24,576" not in text and "40.00 ms of device time a step (3 steps profiled): " \
        "matmul 60.0 %, attention 40.0 %" in text and "| 20.000 | 72 | `sm90_xmma_gemm_bf16` |" in text
    out.write_text("")
    with pytest.raises(SystemExit, match="holds no measured row"):
        gpu_step.main(["--markdown", str(out)])


def _assert_shellcheck_clean(script: Path) -> None:
    import shutil
    import subprocess

    shellcheck = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    lint = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout


def test_the_gpu_check_script_lints_and_runs_through_without_a_gpu(tmp_path):
    # scripts/gpu_check.sh is the one command a lent GPU's session runs: it must not fail on its own mistakes there
    import os
    import subprocess

    script = REPO / "scripts" / "gpu_check.sh"
    _assert_shellcheck_clean(script)
    # a budget too small for the tests: the benchmark says why it measured nothing, the markdown step runs, the
    # tests are skipped with a line saying so, and every log is in OUT
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    run = subprocess.run(["bash", str(script), "40"], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "sees no CUDA device" in (tmp_path / "gpu_all.log").read_text()
    assert "gpu_step --all exit 1" in (tmp_path / "gpu_all.log").read_text()
    assert (tmp_path / "gpu_all.md").is_file() and "torch" in (tmp_path / "machine.txt").read_text()
    assert "too little for the tests" in (tmp_path / "test_gpu.log").read_text()


@pytest.mark.parametrize("name", ["gpu_wheels.sh", "torch_compat.sh"])
def test_the_scripts_a_gpu_session_runs_before_its_device_call_lint_clean(name):
    # gpu_wheels.sh fills .whl/ for gpu_check.sh; torch_compat.sh runs these tests under the lent image's torch.
    # Both download (PyPI), which tests do not (tests/conftest.py's guard): their runs are recorded in
    # benchmarks/RESULTS.md, "GPU step with compile"; here, shellcheck and the refusal without arguments
    import subprocess

    script = REPO / "scripts" / name
    _assert_shellcheck_clean(script)
    if name == "torch_compat.sh":
        run = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
        assert run.returncode != 0 and "usage: bash scripts/torch_compat.sh TORCH_VERSION" in run.stderr
