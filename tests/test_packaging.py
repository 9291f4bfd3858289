"""Package metadata: the sdist carries what its tests need; the license is an SPDX expression;
the extras declare ranges (exact versions live only in constraints/)."""

import os
import subprocess
import sys
import tarfile

import pytest
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


def test_extras_are_ranges_not_pins():
    extras = _pyproject()["project"]["optional-dependencies"]
    for name in ("torch", "jax", "paddle"):
        for req in extras[name]:
            assert "==" not in req, req
    assert extras["jax"][:2] == ["jax>=0.9", "jaxlib>=0.9"]  # + flatbuffers (jax.export serialization)
    assert "paddlepaddle>=3.2" in extras["paddle"] and extras["torch"] == ["torch>=2.11.0a0"]


def test_cupy_extras_name_one_cuda_build_each():
    """One CuPy wheel per CUDA major version: an extra that installed cupy-cuda12x beside a user's
    cupy-cuda13x would put two CuPys in one environment (issue 33 item 5)."""
    extras = _pyproject()["project"]["optional-dependencies"]
    assert "cupy" not in extras
    assert extras["cupy-cuda12"] == ["cupy-cuda12x"] and extras["cupy-cuda13"] == ["cupy-cuda13x"]
    others = [r for name, reqs in extras.items() if not name.startswith("cupy") for r in reqs]
    assert not [r for r in others if r.startswith("cupy")]  # "all" too: the user picks the build


def test_license_is_an_spdx_string():
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0"
    assert open(os.path.join(ROOT, "LICENSE")).read().lstrip().startswith("Apache License")


def test_sdist_contains_what_its_tests_need(tmp_path):
    pytest.importorskip("setuptools", reason="setuptools (the build backend) is not installed")
    code = (
        "import sys, warnings; warnings.simplefilter('error', DeprecationWarning)\n"
        "from setuptools import build_meta\n"
        f"print(build_meta.build_sdist({str(tmp_path)!r}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "license" not in r.stderr.lower(), r.stderr  # no deprecation of the license table form
    name = r.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / name) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        pkg_info = tar.extractfile(f"{name[: -len('.tar.gz')]}/PKG-INFO").read().decode()
    needed_files = ("conftest.py", "tests/catalogue.py", "tests/test_errors.py", "LICENSE", "interop/_warp_compat.py")
    needed_files += ("mkdocs.yml", "docs/index.md", "docs/guide/torch.md", "docs/results.png", "benchmarks/results.png")
    needed_files += ("docs/stylesheets/extra.css", "docs/measurements/bench.json")
    for needed in needed_files + (".ci/run",):
        assert needed in names, needed
    assert "License-Expression: Apache-2.0" in pkg_info


def test_lint_session_covers_every_python_folder():
    # ruff check and ruff format --check run over these; a new folder of Python files must be added
    import ast

    tree = ast.parse(open(os.path.join(ROOT, "noxfile.py")).read())
    lint = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "lint")
    folders = next(
        [e.value for e in n.value.elts]
        for n in ast.walk(lint)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "folders"
    )
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    tops = {p.split("/", 1)[0] for p in tracked}
    assert tops <= set(folders), sorted(tops - set(folders))
    source = ast.get_source_segment(open(os.path.join(ROOT, "noxfile.py")).read(), lint)
    assert '"format", "--check", *folders' in source and '"mypy", "interop", "adapters"' in source


def _readme_numpy_quick_start() -> str:
    import re

    text = open(os.path.join(ROOT, "README.md")).read()
    section = text.split("## Quick start", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_runs_the_quick_start(tmp_path):
    """Build the sdist, build the wheel from it (as ``python -m build`` does), pip-install the wheel
    into a new virtual environment and run the README's NumPy quick start there, from outside the
    source tree: a module or data file left out of the wheel fails here. No downloads: the wheel is
    installed with ``--no-deps --no-index``, and the new environment sees this environment's
    packages (warp, numpy) through a path file, after its own."""
    pytest.importorskip("setuptools", reason="setuptools (the build backend) is not installed")
    import sysconfig
    import zipfile

    build = "import sys\nfrom setuptools import build_meta\nprint(build_meta.build_sdist(sys.argv[1]))\n"
    r = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    sdist = r.stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / sdist) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    src = tmp_path / "src" / sdist[: -len(".tar.gz")]
    wheel_code = "import sys\nfrom setuptools import build_meta\nprint(build_meta.build_wheel(sys.argv[1]))\n"
    r = subprocess.run(
        [sys.executable, "-c", wheel_code, str(tmp_path / "dist")], cwd=src, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    wheel = tmp_path / "dist" / r.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    for needed in ("interop/__init__.py", "interop/_warp_compat.py", "interop/py.typed", "adapters/numpy.py"):
        assert needed in names, needed
    assert not any(n.startswith("tests/") for n in names), "tests are not part of the wheel"

    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    r = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # this environment's packages (warp, numpy, ml_dtypes), after the venv's own site-packages
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()
    # (and the folders the installed dependencies were imported from: on the GPU image Warp is
    # unpacked into a folder on PYTHONPATH, not into site-packages)
    import ml_dtypes
    import numpy
    import warp

    deps = [os.path.dirname(os.path.dirname(m.__file__)) for m in (warp, numpy, ml_dtypes)]
    here = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *deps])
    with open(os.path.join(site, "_test_env_packages.pth"), "w") as f:
        f.write("\n".join(here) + "\n")

    script = tmp_path / "run" / "quick_start.py"
    script.parent.mkdir()
    script.write_text(
        _readme_numpy_quick_start()
        + "\nimport adapters.numpy\nprint('FROM', interop.__file__, adapters.numpy.__file__)\n"
    )
    r = subprocess.run([python, str(script)], cwd=script.parent, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[1. 3. 5. 7.]" in r.stdout, r.stdout
    where = r.stdout.split("FROM", 1)[1].split()
    assert all(p.startswith(site) for p in where), (where, site)  # the installed wheel, not the source tree
