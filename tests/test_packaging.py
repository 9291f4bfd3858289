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
    assert "paddlepaddle>=3.2" in extras["paddle"] and extras["torch"] == ["torch>=2.13"]


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
    for needed in ("conftest.py", "tests/catalogue.py", "tests/test_errors.py", "LICENSE", "interop/_warp_compat.py"):
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
