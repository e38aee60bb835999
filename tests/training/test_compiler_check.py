"""pretrain.compile needs a compiler beside Python (training/run_checks.py `check_compiler`): inductor's C++ kernels
on the CPU, Triton's launchers (a C compiler) on CUDA. A machine without one is refused when the stage starts, in one
line naming the option and the fix, instead of failing inside inductor at the first step. The Triton lookup mirrors
triton/runtime/build.py (CC, else gcc, else clang) and is checked here without a GPU."""

from __future__ import annotations

import pytest
import torch
from torch._inductor import config as inductor_config

from bertfactory.errors import ConfigError
from training import run_checks
from training.pretrain_config import PretrainConfig

COMPILED = PretrainConfig(compile=True, static_shapes=True)


def _which(present: set[str]):
    return lambda name: f"/usr/bin/{name}" if name in present else None


@pytest.mark.parametrize("environ, present, found", [
    ({}, {"gcc", "clang"}, "/usr/bin/gcc"),
    ({}, {"clang"}, "/usr/bin/clang"),
    ({}, set(), None),
    ({"CC": "clang"}, {"gcc", "clang"}, "/usr/bin/clang"),
    ({"CC": "cc-that-is-not-there"}, {"gcc"}, None),  # Triton takes CC as given: a wrong CC fails there too
])
def test_the_c_compiler_triton_would_take(environ, present, found):
    assert run_checks.triton_c_compiler(environ, _which(present)) == found


def test_cuda_without_triton_or_a_c_compiler_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(run_checks, "triton_installed", lambda: False)
    with pytest.raises(ConfigError, match="needs Triton .* and it is not installed"):
        run_checks.check_compiler(COMPILED, torch.device("cuda"))
    monkeypatch.setattr(run_checks, "triton_installed", lambda: True)
    monkeypatch.setattr(run_checks, "triton_c_compiler", lambda: None)
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(ConfigError) as err:
        run_checks.check_compiler(COMPILED, torch.device("cuda"))
    message = str(err.value)
    assert "\n" not in message and "pretrain.compile" in message and "neither gcc nor clang" in message, message
    monkeypatch.setenv("CC", "/opt/missing-cc")
    with pytest.raises(ConfigError, match="CC=/opt/missing-cc is not an executable"):
        run_checks.check_compiler(COMPILED, torch.device("cuda"))
    run_checks.check_compiler(PretrainConfig(), torch.device("cuda"))  # eager: no compiler needed


def test_cpu_without_a_cxx_compiler_is_refused_in_one_line():
    with inductor_config.patch({"cpp.cxx": (None, "/nonexistent/g++")}), pytest.raises(ConfigError) as err:
        run_checks.check_compiler(COMPILED, torch.device("cpu"))
    message = str(err.value)
    assert "\n" not in message and "/nonexistent/g++" in message and "CXX" in message, message
    run_checks.check_compiler(PretrainConfig(), torch.device("cpu"))


def test_this_machine_has_the_cpu_toolchain():
    # the CPU compile tests (test_compile.py) run here; the check must pass where inductor works
    run_checks.check_compiler(COMPILED, torch.device("cpu"))

