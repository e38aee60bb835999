"""`bertfactory pretrain` with pretrain.compile on a machine without the compiler inductor needs (here: the C++
compiler of the CPU path, pointed at a path that does not exist) stops at the start of the stage with one line that
names the option and the fix, and trains nothing; the same run without compile trains (training/run_checks.py).
`bertfactory doctor` says the same of this machine."""

from __future__ import annotations

from torch._inductor import config as inductor_config

from bertfactory.samples import sample_path
from flows.cli import main
from training import run_checks

SOTU = ("1790_george_washington_n.txt", "1791_george_washington_n.txt")
PRETRAIN = {"device": "cpu", "seed": 1, "batch_size": 2, "max_steps": 2, "warmup_steps": 1, "log_every": 1,
            "save_every": 2, "num_threads": 1}
MODEL = {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "intermediate_size": 32, "max_position_embeddings": 32}


def test_compile_without_a_compiler_is_refused_before_training(tiny_recipe, tmp_path, capsys):
    recipe = tiny_recipe(tmp_path / "recipe.yaml", [sample_path("sotu") / n for n in SOTU], model=MODEL,
                         pretrain=PRETRAIN)
    run = tmp_path / "run"
    assert main(["preprocess", str(recipe), "--run-dir", str(run), "--no-prefect"]) == 0
    capsys.readouterr()
    compiled = ["--set", "pretrain.compile=true", "--set", "pretrain.static_shapes=true"]
    with inductor_config.patch({"cpp.cxx": (None, "/nonexistent/g++")}):
        assert main(["pretrain", str(recipe), "--run-dir", str(run), "--no-prefect", *compiled]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: pretrain.compile on the CPU needs a C++ compiler") and len(err.splitlines()) == 1, err
    assert "apt-get install g++" in err and "pretrain.compile: false" in err, err
    assert not (run / "pretrain" / "final").exists()
    assert main(["pretrain", str(recipe), "--run-dir", str(run), "--no-prefect"]) == 0
    assert (run / "pretrain" / "final" / "model.safetensors").is_file()


def test_doctor_says_what_compile_needs(monkeypatch):
    from flows import doctor

    assert doctor._compile_path(None) == "ready (CPU: inductor's C++ kernels)"
    with inductor_config.patch({"cpp.cxx": (None, "/nonexistent/g++")}):
        assert doctor._compile_path(None).startswith("missing: pretrain.compile on the CPU needs a C++ compiler")
    monkeypatch.setattr(run_checks, "triton_installed", lambda: True)
    monkeypatch.setattr(run_checks, "triton_c_compiler", lambda: "/usr/bin/gcc")
    assert doctor._compile_path("13.0") == "ready (CPU: inductor's C++ kernels; CUDA: Triton, C compiler /usr/bin/gcc)"
    monkeypatch.setattr(run_checks, "triton_c_compiler", lambda: None)
    assert "CUDA: missing: pretrain.compile on CUDA needs a C compiler" in doctor._compile_path("13.0")
