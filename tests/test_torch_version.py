"""The supported torch versions: the floor declared in pyproject.toml is the one the adapter enforces,
a torch below it is refused at the first torch call (naming the version found and the range), and
the ``torch`` extra never replaces an installed supported torch.

On a supported torch every test here runs; on a torch below the floor (``nox -s torch_below_floor``,
torch 2.10.0) the refusal is checked on that real torch.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tomllib
import warp as wp
from packaging.requirements import Requirement
from packaging.version import Version

torch = pytest.importorskip("torch")

import interop  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _torch_requirement() -> Requirement:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    (req,) = [Requirement(r) for r in extras["torch"] if Requirement(r).name == "torch"]
    return req


REQ = _torch_requirement()
FLOOR = min(Version(s.version) for s in REQ.specifier if s.operator == ">=")
INSTALLED = Version(torch.__version__)
SUPPORTED = (INSTALLED.major, INSTALLED.minor) >= (FLOOR.major, FLOOR.minor)


@wp.kernel
def _double(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = 2.0 * x[i]


def _expected_message() -> str:
    floor = f"{FLOOR.major}.{FLOOR.minor}"
    return rf"needs torch>={re.escape(floor)} \(verified on .*\); this environment has torch {re.escape(torch.__version__)}"


# ---- on a supported torch -------------------------------------------------------------------
needs_supported = pytest.mark.skipif(not SUPPORTED, reason=f"torch {torch.__version__} is below the floor {FLOOR}")


@needs_supported
def test_adapter_floor_is_the_declared_floor():
    from adapters.torch import compat as _torch_compat

    assert _torch_compat.TORCH_FLOOR == (FLOOR.major, FLOOR.minor)
    assert _torch_compat.TORCH_VERSION[:2] == (INSTALLED.major, INSTALLED.minor)


@needs_supported
@pytest.mark.parametrize(
    "version, parsed",
    [
        ("2.11.0", (2, 11, 0)),
        ("2.11.0+cu130", (2, 11, 0)),
        ("2.11.0a0+40ba1a0", (2, 11, 0)),  # NGC containers' pre-release builds
        ("2.15.0.dev20261101+cpu", (2, 15, 0)),
        ("3.0", (3, 0, 0)),
    ],
)
def test_version_check_accepts_the_floor_and_above(version, parsed):
    from adapters.torch import compat as _torch_compat

    assert _torch_compat.parse_version(version) == parsed
    _torch_compat.check_version(version)  # no error


@needs_supported
@pytest.mark.parametrize("version", ["2.10.0+cu128", "2.10.0a0+git", "1.13.1", "2.2.0"])
def test_version_check_refuses_below_the_floor_naming_version_and_range(version):
    from adapters.torch import compat as _torch_compat

    with pytest.raises(
        interop.UnsupportedError, match=rf"needs torch>=2\.11 .*this environment has torch {re.escape(version)}"
    ):
        _torch_compat.check_version(version)


@needs_supported
def test_version_check_refuses_what_is_not_a_version():
    from adapters.torch import compat as _torch_compat

    with pytest.raises(ValueError, match="not a torch version: 'nightly'"):
        _torch_compat.parse_version("nightly")


@pytest.mark.parametrize("version", ["2.11.0", "2.11.0+cu130", "2.11.0a0+40ba1a0", "2.12.1", "2.15.0", "2.16.0+cu131"])
def test_torch_extra_admits_every_supported_torch_already_installed(version):
    # pip keeps an installed distribution when the requirement contains its version (pre-releases
    # included: pip checks an installed version with prereleases=True)
    assert REQ.specifier.contains(version, prereleases=True), (str(REQ), version)


@pytest.mark.parametrize("version", ["2.10.0", "2.10.0+cu128", "2.9.1"])
def test_torch_extra_excludes_what_the_adapter_refuses(version):
    assert not REQ.specifier.contains(version, prereleases=True), (str(REQ), version)


@needs_supported
def test_a_call_on_a_supported_torch_works():
    op = interop.op(_double)
    x = torch.arange(4, dtype=torch.float32, device="cpu")
    torch.testing.assert_close(op(x), 2 * x)


# ---- on a torch below the floor (nox -s torch_below_floor) ------------------------------------
needs_below = pytest.mark.skipif(SUPPORTED, reason=f"torch {torch.__version__} is supported")


@needs_below
def test_first_torch_call_below_the_floor_raises_naming_version_and_range():
    op = interop.op(_double)
    x = torch.arange(4, dtype=torch.float32, device="cpu")
    with pytest.raises(interop.UnsupportedError, match=_expected_message()):
        op(x)
    with pytest.raises(interop.UnsupportedError, match=_expected_message()):  # every call, not only the first
        op(x)
    # the op still runs from other frameworks
    np.testing.assert_allclose(op(np.arange(4, dtype=np.float32)), 2 * np.arange(4, dtype=np.float32))


@needs_below
def test_importing_torch_after_describing_ops_below_the_floor_does_not_break_the_import(tmp_path):
    # ops described first, torch imported after: the adapter's import hook must not make `import torch` fail
    code = (
        "import interop, warp as wp\n"
        "@wp.kernel\n"
        "def k(x: wp.array(dtype=float), out: wp.array(dtype=float)):\n"
        "    out[wp.tid()] = x[wp.tid()]\n"
        "op = interop.op(k)\n"
        "import torch\n"
        "try:\n"
        "    op(torch.zeros(2, device='cpu'))\n"
        "except interop.UnsupportedError as e:\n"
        "    print('REFUSED', e)\n"
    )
    script = tmp_path / "below_floor.py"  # a file: Warp reads a kernel's source
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": ROOT}
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "REFUSED" in r.stdout and f"this environment has torch {torch.__version__}" in r.stdout, r.stdout
