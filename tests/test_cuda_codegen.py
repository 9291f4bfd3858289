"""Generated kernels compile for CUDA, checked on any machine: Warp's NVRTC builds a module for a GPU
architecture without a GPU or a driver (``wp.compile_aot_module(module, arch=...)``).

Forward mode's tangent kernels, and with them their adjoints (second order), are code the package
generates; a GPU runs them only where one is lent. A construct CUDA rejects where the CPU's compiler
accepts it (a helper overload missing for a dtype, a literal typed differently) would first show on
a GPU. Here the modules of the catalogue's and the user-style kernels (tests/catalogue.py,
tests/user_kernels.py, with their generic overloads) and the tangent kernel of every rule group and structure case of
``tests/test_tangent_kernels.py`` (and of ``tests/test_tangent_decompositions.py``) and the tangent op of every catalogue kernel (each dtype the
catalogue calls it with, so generic kernels have their overloads) are compiled for
``INTEROP_CUDA_ARCH`` (default 90: the H100/H200 the GPU runs use). The values are checked on the
CPU by those tests and on a GPU by the CUDA-marked forward-mode tests. Skipped where Warp has no
NVRTC (a build without CUDA), saying so.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import numpy as np
import pytest
import warp as wp
from catalogue import CASES
from test_op_jvp import KERNEL_CASES
from test_tangent_decompositions import CASES as DECOMPOSITION_CASES
from test_tangent_kernels import RULE_GROUPS, STRUCTURE, bfloat16_piecewise
from test_tangent_tiles import CASES as TILE_CASES
from test_tangent_tiles import _tangent_kernel as tile_tangent_kernel
from user_kernels import USER_CASES

from interop import _tangent, _warp_compat

ARCH = int(os.environ.get("INTEROP_CUDA_ARCH", "90"))

GENERATED = {f"rules-{g}": case.tangent for g, (case, _) in RULE_GROUPS.items()}
GENERATED.update({f"structure-{n}": case.tangent for n, case in STRUCTURE.items()})
GENERATED["bfloat16-helpers"] = lambda: _tangent.tangent_kernel(
    bfloat16_piecewise, {"a": True, "b": True, "y": True}, "bfloat16"
)
# every tile tangent kernel of tests/test_tangent_tiles.py (tile_matmul, tile_map's generated
# elementwise tangents, tile_max's selection... as NVRTC builds them for the GPU)
GENERATED.update({f"tiles-{c.id}": (lambda c=c: tile_tangent_kernel(c)) for c in TILE_CASES})
# the decompositions' closed forms (svd3, svd2, eig3, qr3: tests/test_tangent_decompositions.py)
GENERATED.update({f"decompositions-{n}": case.tangent for n, case in DECOMPOSITION_CASES.items()})


def _all_differentiable(kernel: Any) -> Any:
    """The tangent kernel of ``kernel`` with every float parameter differentiated."""
    diff = {a.label: _tangent.float_like(getattr(a.type, "dtype", a.type)) for a in kernel.adj.args}
    return lambda: _tangent.tangent_kernel(kernel, diff, kernel.key)


def _module_kernels(name: str, kernels: tuple[str, ...]) -> dict:
    mod = __import__(name)
    return {f"{name.removeprefix('test_tangent_')}-{k}": _all_differentiable(getattr(mod, k)) for k in kernels}


# the query, rotation, several-results and struct-value tangents (issue 42)
GENERATED.update(
    _module_kernels("test_tangent_queries", ("compute_density", "radius_search", "bvh_overlaps", "surface_points"))
)
GENERATED.update(
    _module_kernels(
        "test_tangent_rotations", ("axis_angle", "axis_angle_one_name", "func_tuple_one_name", "slerp", "static_calls")
    )
)
GENERATED.update(_module_kernels("test_tangent_structs", ("struct_values", "defaults", "flags")))


@pytest.fixture(scope="module")
def arch():
    wp.init()
    archs = _warp_compat.nvrtc_archs()
    if not archs:
        pytest.skip("this Warp build has no NVRTC (built without CUDA): nothing compiles for a GPU here")
    if ARCH not in archs:
        pytest.skip(f"INTEROP_CUDA_ARCH={ARCH}: Warp's NVRTC compiles for {list(archs)}")
    return ARCH


def _compile(module, arch, where) -> None:
    artifacts = wp.compile_aot_module(module, arch=arch, module_dir=str(where))
    if artifacts is None:  # Warp 1.16 returns nothing: the built code is in module_dir
        artifacts = [p for p in pathlib.Path(where).rglob("*") if p.suffix in (".ptx", ".cubin")]
    assert artifacts and all(p.exists() and p.stat().st_size > 0 for p in artifacts), artifacts


@pytest.mark.parametrize("name", list(GENERATED))
def test_tangent_kernel_compiles_for_cuda(name, arch, tmp_path):
    tk = GENERATED[name]()
    _compile(tk.kernel.module, arch, tmp_path)


@pytest.mark.parametrize("case", KERNEL_CASES, ids=[c.id for c in KERNEL_CASES])
def test_catalogue_tangent_op_compiles_for_cuda(case, arch, tmp_path):
    rng = np.random.default_rng(3)
    for dt in case.dtypes:
        if dt not in (np.float32, np.float64):
            continue
        args = list(case.make(rng, dt))
        diff = [i for i, p in enumerate(case.op.description.call_params) if p.differentiable]
        tangents = [np.ones_like(args[i]) if isinstance(args[i], np.ndarray) else 1.0 for i in diff]
        # the CPU call makes the overloads of a generic tangent kernel (float32, float64)
        case.op.jvp(*args, tangents=tangents, **case.call_kwargs)
    kernel = case.op.tangent().description.fn
    _compile(kernel.module, arch, tmp_path)


def _kernel_modules() -> dict[str, tuple[Any, list]]:
    """The Warp modules of the catalogue's and the user-style kernels (one module holds many), with
    the cases whose calls make their generic kernels' overloads."""
    found: dict[str, tuple[Any, list]] = {}
    for case in CASES + USER_CASES:
        d = case.op.description
        if d.kind != "kernel":
            continue
        module = d.fn.module
        found.setdefault(module.name, (module, []))[1].append(case)
    return found


MODULES = _kernel_modules()


@pytest.mark.parametrize("name", list(MODULES))
def test_kernel_module_compiles_for_cuda(name, arch, tmp_path):
    module, cases = MODULES[name]
    rng = np.random.default_rng(5)
    for case in cases:
        for dt in case.dtypes:
            case.op(*case.make(rng, dt), **case.call_kwargs)  # the overloads of generic kernels
    _compile(module, arch, tmp_path)
