"""The package ships what the CLI needs outside the repository: every Python package (pyproject lists them by hand
because configs/ is mapped in as `bertfactory.recipes`), the bundled recipes as package data, and the licence as
an SPDX expression with its file; a wheel built offline carries all of it and resolves recipes from any directory."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from importlib import resources
from pathlib import Path

from setuptools import find_packages

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
ROOTS = ("bertfactory", "preprocessing", "training", "evaluation", "distillation", "flows")


def test_every_package_of_the_tree_is_listed_and_configs_is_the_recipes_package():
    setuptools_table = PYPROJECT["tool"]["setuptools"]
    found = set(find_packages(str(REPO), include=[f"{r}" for r in ROOTS] + [f"{r}.*" for r in ROOTS]))
    listed = set(setuptools_table["packages"])
    assert found - listed == set(), f"packages missing from pyproject.toml's [tool.setuptools] packages: {found - listed}"
    assert listed - found == {"bertfactory.recipes"}
    assert setuptools_table["package-dir"] == {"bertfactory.recipes": "configs"}
    assert setuptools_table["package-data"]["bertfactory.recipes"] == ["*.yaml"]


def test_licence_is_an_spdx_expression_with_its_file():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (REPO / "LICENSE").read_text(encoding="utf-8")[:200]


def test_the_installed_recipes_package_is_configs():
    shipped = {p.name for p in resources.files("bertfactory.recipes").iterdir() if p.name.endswith(".yaml")}
    assert shipped == {p.name for p in (REPO / "configs").glob("*.yaml")} and "local.yaml" in shipped


def test_a_wheel_built_offline_ships_the_recipes_and_resolves_them_from_anywhere(tmp_path):
    source = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((REPO / name).read_bytes())
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    assert "deprecated" not in (build.stdout + build.stderr).lower()  # e.g. setuptools' licence-table block
    (wheel,) = (tmp_path / "dist").glob("bertfactory-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {f"bertfactory/recipes/{p.name}" for p in (REPO / "configs").glob("*.yaml")} <= names
    assert "License-Expression: Apache-2.0" in metadata and any(n.endswith("licenses/LICENSE") for n in names)

    target = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target",
                              str(target), str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = ("import flows.recipe as r; print(r.__file__); print(r.resolve_recipe('local')); "
             "print(r.resolve_recipe('configs/bert-base.yaml')); print(r.load_recipe('tiny-albert').name)")
    env = {**os.environ, "PYTHONPATH": str(target)}
    run = subprocess.run([sys.executable, "-c", probe], cwd=elsewhere, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    module, local, base, name = run.stdout.split()
    recipes = target / "bertfactory" / "recipes"
    assert module.startswith(str(target))  # the wheel's code, not the checkout's
    assert (local, base, name) == (str(recipes / "local.yaml"), str(recipes / "bert-base.yaml"), "tiny-albert")
