"""Warp's internals live behind one seam (interop/_warp_compat.py), checked on named versions."""

from __future__ import annotations

import pathlib
import re
import warnings

import numpy as np
import pytest
import warp as wp

import interop
from interop import _warp_compat

ROOT = pathlib.Path(__file__).resolve().parent.parent


@wp.kernel
def _compat_saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


def test_only_the_compat_module_imports_warp_internals():
    offenders = []
    for folder in ("interop", "adapters"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "_warp_compat.py":
                continue
            if re.search(r"warp\._src|warp\.context|warp\.codegen", path.read_text()):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_installed_warp_is_a_checked_version():
    # the project's constraints pin a checked Warp; a newer one must be added to CHECKED after checking
    major, minor = (int(p) for p in wp.config.version.split(".")[:2])
    assert ((major, minor) in _warp_compat.CHECKED) == _warp_compat.VERIFIED


def test_unverified_warp_falls_back_to_public_launch_with_one_warning(monkeypatch):
    x = np.arange(8, dtype=np.float32)
    y = np.ones(8, np.float32)
    expected = 3.0 * x + y
    monkeypatch.setattr(_warp_compat, "VERIFIED", False)
    monkeypatch.setattr(_warp_compat, "_warned", False)
    op = interop.op(_compat_saxpy, name="compat::unverified")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [op(x, y, 3.0) for _ in range(3)]
        op2 = interop.op(_compat_saxpy, zero_outputs=False)
        got.append(op2(x, y, 3.0))
    for g in got:
        np.testing.assert_allclose(g, expected, rtol=1e-6)
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1, msgs
    assert f"warp-lang {wp.config.version} is not a version" in msgs[0]
    assert "public launch replay" in msgs[0]


def test_direct_path_matches_public_path():
    x = np.linspace(-1, 1, 33, dtype=np.float32)
    y = np.full(33, 0.5, np.float32)
    op = interop.op(_compat_saxpy)
    direct = op(x, y, -2.0)
    out = wp.zeros(33, dtype=float, device="cpu")
    wp.launch(
        _compat_saxpy, dim=33, inputs=[wp.array(x, device="cpu"), wp.array(y, device="cpu"), -2.0, out], device="cpu"
    )
    np.testing.assert_array_equal(direct, out.numpy())


def test_warp_below_the_floor_is_refused_at_describe_naming_version_and_range(monkeypatch):
    monkeypatch.setattr(_warp_compat, "VERSION", (1, 15))
    with pytest.raises(interop.UnsupportedError, match=r"warp-lang >= 1\.16 .*installed warp-lang is \d"):
        interop.op(_compat_saxpy, name="compat::below_floor")


def test_every_supported_warp_is_checked_and_declared():
    """pyproject.toml's floor is CHECKED's oldest; the nox matrix has a session per CHECKED minor."""
    text = (ROOT / "pyproject.toml").read_text()
    floor = re.search(r'"warp-lang>=(\d+)\.(\d+)"', text)
    assert floor and (int(floor.group(1)), int(floor.group(2))) == _warp_compat.FLOOR == _warp_compat.CHECKED[0]
    nox_text = (ROOT / "noxfile.py").read_text()
    for major, minor in _warp_compat.CHECKED:
        assert f'"{major}.{minor}": "{major}.{minor}.' in nox_text, (major, minor)
