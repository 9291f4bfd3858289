"""Issue 44 item 3: ops' Warp modules built ahead of time (``interop.precompile``), shipped in a folder
and loaded from it at first use (``interop.use_precompiled``).

Each build and each first call runs in a fresh process with its own empty Warp kernel cache
(``WARP_CACHE_PATH``): a first call that compiles nothing leaves that cache without a module, and
Warp's own line per module load says ``(cached)`` (loaded from a file), never ``(compiled)``. Values,
gradients and tangents are compared with the kernel's closed form. A folder that does not match
(a kernel edited since, another Warp, another CPU target) is compiled instead, with one
``PrecompiledWarning`` that says why, and gives the same answers.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest
import warp as wp
from _subprocess import ROOT, run_script

import interop
from interop import _warp_compat

KERNELS = """
from typing import Any

import warp as wp

import interop


@wp.kernel
def wave(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * wp.sin(x[i]) * y[i] + x[i] * x[i]


@wp.kernel
def cube(x: wp.array(dtype=Any), out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = x[i] * x[i] * x[i]


# a generic kernel is precompiled with the overloads its module declares
wp.overload(cube, {"x": wp.array(dtype=wp.float32), "out": wp.array(dtype=wp.float32)})
wp.overload(cube, {"x": wp.array(dtype=wp.float64), "out": wp.array(dtype=wp.float64)})

f = interop.op(wave, name="pc::wave")
g = interop.op(cube, name="pc::cube")
"""

BUILD = """
import sys
import interop
import pc_kernels as K

interop.precompile([K.f, K.g], sys.argv[1], cuda_archs=(), forward_mode=True)
"""

# the first calls of a library user: NumPy, torch forward and backward (a scalar's gradient too), a
# tangent, a generic kernel, and JAX eager, grad and jvp where JAX is installed
FIRST_CALLS = """
import json, os, sys, warnings
import numpy as np
import warp as wp
import interop

warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    {setup}
    x = np.linspace(0.1, 1.0, 5).astype(np.float32)
    y = np.linspace(1.0, 2.0, 5).astype(np.float32)
    res = {{"value": f(x, y, 2.0).tolist()}}
    import torch

    xt = torch.tensor(x, requires_grad=True, device="cpu")
    at = torch.tensor(2.0, requires_grad=True, device="cpu")
    f(xt, torch.tensor(y, device="cpu"), at).sum().backward()
    res["grad_x"], res["grad_a"] = xt.grad.tolist(), float(at.grad)
    if {more}:
        _, dy = f.jvp(x, y, 2.0, tangents=[np.ones(5, np.float32), None, None])
        res["tangent"] = dy.tolist()
        res["cube"] = g(x.astype(np.float64)).tolist()
        res["cube_tangent"] = g.jvp(x.astype(np.float64), tangents=[np.ones(5)])[1].tolist()
        try:
            import jax, jax.numpy as jnp
        except ImportError:
            pass
        else:
            cpu = jax.devices("cpu")[0]
            xj, yj = jax.device_put(jnp.asarray(x), cpu), jax.device_put(jnp.asarray(y), cpu)
            res["jax_value"] = f(xj, yj, 2.0).tolist()
            gx, ga = jax.grad(lambda u, s: f(u, yj, s).sum(), argnums=(0, 1))(xj, 2.0)
            res["jax_grad_x"], res["jax_grad_a"] = gx.tolist(), float(ga)
            res["jax_tangent"] = jax.jvp(lambda u: f(u, yj, 2.0), (xj,), (jnp.ones_like(xj),))[1].tolist()
res["warnings"] = [str(w.message) for w in caught if w.category is interop.PrecompiledWarning]
res["cache"] = sorted(n for n in os.listdir(wp.config.kernel_cache_dir) if n.startswith("wp_"))
print("RESULTS " + json.dumps(res))
"""

LOAD = re.compile(r"^Module (\S+) \S+ load on device '(\S+)' took .*\((\w+)\)\s*$", re.M)


def _expected(a: float = 2.0) -> dict:
    x = np.linspace(0.1, 1.0, 5).astype(np.float32).astype(np.float64)
    y = np.linspace(1.0, 2.0, 5).astype(np.float32).astype(np.float64)
    return {
        "value": a * np.sin(x) * y + x * x,
        "grad_x": a * np.cos(x) * y + 2 * x,
        "grad_a": float(np.sum(np.sin(x) * y)),
        "tangent": a * np.cos(x) * y + 2 * x,
        "cube": x**3,
        "cube_tangent": 3 * x**2,
    }


def _check_values(res: dict, expected: dict) -> None:
    for k, want in expected.items():
        if k in res:
            np.testing.assert_allclose(res[k], want, rtol=2e-5, atol=1e-6, err_msg=k)
    for k in ("value", "grad_x", "grad_a", "tangent"):
        if "jax_" + k in res:
            np.testing.assert_allclose(res["jax_" + k], expected[k], rtol=2e-5, atol=1e-6, err_msg="jax_" + k)


def _first_calls(cache: Path, setup: str, more: bool = True, kernels: str = KERNELS, python=None, env=None):
    """Run the first calls in a fresh process with the empty Warp cache ``cache``: (results, loads)."""
    e = {"WARP_CACHE_PATH": str(cache), "WARP_INTEROP_QUIET": "1", **(env or {})}
    code = FIRST_CALLS.format(setup=setup, more=more)
    if python is None:
        p = run_script(code, env=e, modules={"pc_kernels": kernels})
    else:
        script = cache.parent / "first_calls.py"
        script.write_text(code)
        p = subprocess.run([python, str(script)], cwd=script.parent, capture_output=True, text=True, env=env | e)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULTS ")]
    assert lines, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(lines[-1][len("RESULTS ") :]), LOAD.findall(p.stdout)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The test kernels' modules, forward mode included, built for the CPU in a fresh process."""
    tmp = tmp_path_factory.mktemp("precompiled")
    out = tmp / "folder"
    run_script(BUILD, str(out), env={"WARP_CACHE_PATH": str(tmp / "build_cache")}, modules={"pc_kernels": KERNELS})
    assert not [n for n in os.listdir(tmp / "build_cache") if n.startswith("wp_")], "precompile used Warp's cache"
    return out


SETUP = "interop.use_precompiled(sys.argv[1] if len(sys.argv) > 1 else {folder!r}); from pc_kernels import f, g"


@pytest.mark.slow
def test_first_calls_load_every_module_from_the_folder_and_compile_nothing(folder, tmp_path):
    manifest = json.loads((folder / "interop-precompiled.json").read_text())
    assert manifest["warp"] == wp.config.version and set(manifest["ops"]) >= {"pc::wave", "pc::cube"}
    res, loads = _first_calls(tmp_path / "cache", SETUP.format(folder=str(folder)))
    _check_values(res, _expected())
    if importlib.util.find_spec("jax") is not None:
        assert "jax_grad_a" in res
    assert res["warnings"] == [] and res["cache"] == []
    assert loads and all(how == "cached" for _, _, how in loads), loads
    names = {m for m, _, _ in loads}
    # the kernels' module (adjoint inside), the scalar's gradient variant, the tangent kernels' modules
    assert "pc_kernels" in names and any(m.startswith("interop_scalar_ref.wave") for m in names)
    assert any(m.startswith("interop_tangent.wave") for m in names), names
    assert any(m.startswith("interop_tangent.cube") for m in names), names


@pytest.mark.slow
def test_an_edited_kernel_is_compiled_with_a_warning_never_loaded_stale(folder, tmp_path):
    edited = KERNELS.replace("+ x[i] * x[i]\n", "+ 3.0 * x[i] * x[i]\n")
    assert edited != KERNELS
    res, loads = _first_calls(tmp_path / "cache", SETUP.format(folder=str(folder)), more=False, kernels=edited)
    x = np.linspace(0.1, 1.0, 5).astype(np.float32).astype(np.float64)
    y = np.linspace(1.0, 2.0, 5).astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(res["value"], 2 * np.sin(x) * y + 3 * x * x, rtol=2e-5)
    np.testing.assert_allclose(res["grad_x"], 2 * np.cos(x) * y + 6 * x, rtol=2e-5)
    np.testing.assert_allclose(res["grad_a"], np.sum(np.sin(x) * y), rtol=2e-5)
    assert ("pc_kernels", "cpu", "compiled") in loads, loads
    [w] = [w for w in res["warnings"] if "'pc_kernels'" in w]
    assert "op 'pc::wave'" in w and "changed since it was built" in w and "compiling it instead" in w, w
    assert len(res["warnings"]) == 2, res["warnings"]  # one per module: the kernel's and the scalar variant's


def _edit_manifest(folder: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "folder"
    shutil.copytree(folder, copy)
    manifest = json.loads((copy / "interop-precompiled.json").read_text())
    edit(manifest)
    (copy / "interop-precompiled.json").write_text(json.dumps(manifest))
    return copy


def _other_cpu_target(manifest: dict) -> None:
    for m in manifest["modules"]:
        if m["cpu"]:
            m["cpu"] = re.sub(r"\.(cpu\w+\.)?o$", ".cpu00000000.o", m["cpu"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "edit, why",
    [
        (lambda m: m.update(warp="0.0.1"), f"built with warp-lang 0.0.1, this is warp-lang {wp.config.version}"),
        (_other_cpu_target, "is for another CPU target than this machine's"),
        (lambda m: m.update(platform="Plan9-mips"), "its CPU objects were built on Plan9-mips"),
    ],
    ids=["other-warp", "other-cpu-target", "other-platform"],
)
def test_a_folder_for_another_warp_or_machine_is_compiled_with_a_warning(folder, tmp_path, edit, why):
    copy = _edit_manifest(folder, tmp_path, edit)
    res, loads = _first_calls(tmp_path / "cache", SETUP.format(folder=str(copy)), more=False)
    _check_values(res, _expected())
    assert ("pc_kernels", "cpu", "compiled") in loads and not [x for x in loads if x[2] == "cached"], loads
    assert res["warnings"] and all(why in w and "op 'pc::wave'" in w for w in res["warnings"]), res["warnings"]


def test_cuda_cubins_for_sm80_and_sm90_are_built_without_a_gpu(tmp_path):
    wp.init()
    have = _warp_compat.nvrtc_archs()
    if not {80, 90} <= set(have):
        pytest.skip(f"this Warp's NVRTC does not build sm_80 and sm_90 (it builds: {have or 'none, no CUDA'})")

    @wp.kernel(module="unique")
    def scale(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = s * x[i]

    manifest = interop.precompile(interop.op(scale), tmp_path, cpu=False, cuda_archs=(80, 90))
    assert manifest["cuda_archs"] == [80, 90] and len(manifest["modules"]) == 2  # the kernel's and its scalar variant
    for m in manifest["modules"]:
        assert m["cpu"] is None and m["block_dim"] == 256 and sorted(m["cuda"]) == ["80", "90"]
        for arch, name in m["cuda"].items():
            assert name.endswith(f".sm{arch}.cubin")
            data = (tmp_path / m["dir"] / name).read_bytes()
            assert data[:4] == b"\x7fELF", name  # a cubin is an ELF image
        assert (tmp_path / m["dir"] / f"{m['dir']}.meta").is_file()


def test_precompile_and_use_precompiled_refuse_what_they_cannot_do(tmp_path):
    @wp.kernel(module="unique")
    def twice(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = 2.0 * x[i]

    @wp.kernel(module="unique")
    def generic(x: wp.array(dtype=wp.Float), out: wp.array(dtype=wp.Float)):
        i = wp.tid()
        out[i] = x[i]

    def launches(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        wp.launch(twice, dim=x.shape, inputs=[x], outputs=[out], device=x.device)

    with pytest.raises(interop.UnsupportedError, match=r"op 'launches' is a Python-function op"):
        interop.precompile(interop.op(launches), tmp_path, cuda_archs=())
    with pytest.raises(interop.ArgumentError, match=r"generic kernel '\w*generic' has no overload to build; declare"):
        interop.precompile(interop.op(generic), tmp_path, cuda_archs=())
    with pytest.raises(interop.ArgumentError, match=r"ops must be interop ops, got \['function'\]"):
        interop.precompile([twice.func], tmp_path)
    with pytest.raises(interop.UnsupportedError, match=r"cannot build for sm_12345 here"):
        interop.precompile(interop.op(twice), tmp_path, cuda_archs=(12345,))
    with pytest.raises(interop.ArgumentError, match=r"has no interop-precompiled.json"):
        interop.use_precompiled(tmp_path / "nowhere")


# ---- the wheel: a library that ships its modules inside its package ---------------------------------
PACKAGE = Path(__file__).parent / "data" / "precompiled_pkg"

WHEEL_SETUP = "import tinyops; from tinyops import wave as f; print('FROM', tinyops.__file__)"


def _venv_with_this_environment(tmp_path: Path) -> tuple[str, dict]:
    """A new virtual environment that sees this environment's packages (warp, numpy, torch...) through a
    path file, after its own: nothing is downloaded or installed again."""
    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True
    ).stdout.strip()
    deps = [os.path.dirname(os.path.dirname(m.__file__)) for m in (wp, np)]
    here = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *deps])
    (Path(site) / "_test_env_packages.pth").write_text("\n".join(here) + "\n")
    return python, env | {"PYTHONPATH": str(ROOT)}  # this checkout's interop, as the build used


@pytest.mark.slow
def test_a_wheel_with_precompiled_modules_runs_its_first_call_without_compiling(tmp_path):
    pytest.importorskip("setuptools", reason="setuptools (the build backend) is not installed")
    pytest.importorskip("torch", reason="the first calls include torch's")
    wp.init()
    archs = "80,90" if {80, 90} <= set(_warp_compat.nvrtc_archs()) else ""
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src)
    build = "import sys\nfrom setuptools import build_meta\nprint(build_meta.build_wheel(sys.argv[1]))\n"
    env = dict(os.environ, WARP_CACHE_PATH=str(tmp_path / "build_cache"), TINYOPS_CUDA_ARCHS=archs)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    r = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path / "dist")], cwd=src, capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    wheel = tmp_path / "dist" / r.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert "tinyops/_warp_modules/interop-precompiled.json" in names
    assert any(n.endswith(".o") for n in names)
    if archs:  # the CUDA modules, built for sm_80 and sm_90 by NVRTC without a GPU
        assert {a for n in names for a in re.findall(r"\.sm(\d+)\.cubin$", n)} == {"80", "90"}

    python, venv_env = _venv_with_this_environment(tmp_path)
    r = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        env=venv_env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "run").mkdir()
    res, loads = _first_calls(tmp_path / "run" / "cache", WHEEL_SETUP, more=False, python=python, env=venv_env)
    _check_values(res, _expected())
    assert res["warnings"] == [] and res["cache"] == []
    assert {m for m, _, _ in loads} == {"tinyops.ops", "interop_scalar_ref.wave_kernel.a"}, loads
    assert all(how == "cached" for _, _, how in loads), loads
