"""One launch geometry on every device (docs/contract.md, "Devices"): a tile kernel launches as
``wp.launch_tiled`` does, the tile grid then the block's lanes, on the CPU and on CUDA alike, so
every tile is computed once on each device; launch dims that would make a CUDA block span several
tiles are refused on both devices, when described or called.

The counting kernel adds 1 per thread to its row: the count per row is the threads Warp runs per
block on that device (1 on the CPU, ``block_dim`` or 256 on CUDA), compared with Warp's own
``wp.launch_tiled`` on the same device.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import interop
from interop._warp_compat import block_threads

TILE = 8
ROWS = 4


@wp.kernel
def tile_rows(x: wp.array2d(dtype=float), out: wp.array(dtype=float), threads: wp.array(dtype=int)):
    i, _lane = wp.tid()
    t = wp.tile_load(x[i], shape=TILE)
    wp.tile_store(out, wp.tile_sum(wp.tile_map(wp.mul, t, t)), offset=i)
    wp.atomic_add(threads, i, 1)


@wp.kernel
def tile_no_row_index(x: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    _lane = wp.tid()
    t = wp.tile_load(x[0], shape=TILE)
    wp.tile_store(out, wp.tile_sum(t))


def _x(device: str) -> wp.array:
    rng = np.random.default_rng(3)
    return wp.array(rng.standard_normal((ROWS, TILE)).astype(np.float32), dtype=float, device=device)


def _warp_reference(device: str, block_dim: int) -> tuple[np.ndarray, np.ndarray]:
    x = _x(device)
    out = wp.zeros(ROWS, dtype=float, device=device)
    threads = wp.zeros(ROWS, dtype=int, device=device)
    wp.launch_tiled(tile_rows, dim=(ROWS,), inputs=[x], outputs=[out, threads], block_dim=block_dim, device=device)
    return out.numpy(), threads.numpy()


@pytest.mark.parametrize(
    "how",
    ["inferred", "per-call block_dim", "tile grid given", "full launch_dims given", "op block_dim"],
)
def test_tile_kernel_computes_every_tile_once(device, how):
    x = _x(device)
    expected = np.sum(x.numpy() ** 2, axis=1)
    kw: dict = {}
    op = interop.op(tile_rows, outputs=2)
    if how == "per-call block_dim":
        kw = {"block_dim": 32}
    elif how == "tile grid given":
        kw = {"launch_dims": (ROWS,)}
    elif how == "full launch_dims given":
        kw = {"launch_dims": (ROWS, 256)}
    elif how == "op block_dim":
        op = interop.op(tile_rows, outputs=2, block_dim=64)
    out, threads = op(x, **kw)
    assert out.device == wp.get_device(device)
    bd = kw.get("block_dim") or op.description.block_dim
    lanes = block_threads(wp.get_device(device), bd)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5)
    # each row ran one block of the device's lanes: every tile once, none skipped
    np.testing.assert_array_equal(threads.numpy(), np.full(ROWS, lanes))
    ref_out, ref_threads = _warp_reference(device, bd or 256)
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-6)
    np.testing.assert_array_equal(threads.numpy(), ref_threads)


def test_tile_kernel_outputs_default_to_the_tile_grid(device):
    out, threads = interop.op(tile_rows, outputs=2)(_x(device))
    assert out.shape == threads.shape == (ROWS,)


def test_tile_kernel_gradient_reaches_every_row(device):
    """The silent wrong answer a GPU found: rows 1..3 of a tile kernel called without launch_dims
    had zero gradients on CUDA. wp.Tape records the op's launch; the gradient is 2x on every row."""
    op = interop.op(tile_rows, outputs=2)
    x = _x(device)
    x.requires_grad = True
    tape = wp.Tape()
    with tape:
        out, _ = op(x)
    tape.backward(grads={out: wp.ones(ROWS, dtype=float, device=device)})
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * x.numpy(), rtol=1e-5)


@pytest.mark.parametrize("dims", [(ROWS, TILE), (ROWS, 32), (ROWS, 1)])
def test_launch_dims_that_split_blocks_are_refused_on_every_device(device, dims):
    # described with them: refused at once (no device involved)
    with pytest.raises(ValueError, match=r"op 'tile_rows': a tile kernel launches whole blocks.*launch_dims=\(4, "):
        interop.op(tile_rows, outputs=2, launch_dims=dims)
    # given per call: refused before any launch, the same on the CPU and on CUDA
    op = interop.op(tile_rows, outputs=2)
    with pytest.raises(ValueError, match=r"end with the block's 256 threads \(block_dim unset: Warp's CUDA default"):
        op(_x(device), launch_dims=dims)
    with pytest.raises(ValueError, match=r"end with the block's 64 threads \(block_dim=64\)"):
        op(_x(device), launch_dims=dims, block_dim=64)


def test_tile_kernel_without_a_tile_index_needs_launch_dims(device):
    op = interop.op(tile_no_row_index, output_dims=1)
    with pytest.raises(ValueError, match=r"op 'tile_no_row_index': cannot infer the launch dimensions of a tile"):
        op(_x(device))
    out = op(_x(device), launch_dims=(256,))
    np.testing.assert_allclose(out.numpy(), [np.sum(_x(device).numpy()[0])], rtol=1e-5)


def test_cpu_blocks_follow_warps_setting():
    """With ``wp.config.enable_cpu_blocks`` Warp runs a CPU block's lanes as fibers: the op's CPU
    launch asks for the same lanes wp.launch_tiled would (when this Warp build has CPU blocks)."""
    dev = wp.get_device("cpu")
    assert block_threads(dev, None) == 1 and block_threads(dev, 32) in (1, 32)
    assert block_threads(wp.get_device("cpu"), 1) == 1
    if not hasattr(wp.config, "enable_cpu_blocks"):
        pytest.skip("this Warp has no wp.config.enable_cpu_blocks")
    old = wp.config.enable_cpu_blocks
    wp.config.enable_cpu_blocks = True
    try:
        assert block_threads(dev, 32) == 32
        op = interop.op(tile_rows, outputs=2, block_dim=32)
        try:
            out, threads = op(_x("cpu"))
        except Exception as e:  # a Warp build without CPU fibers refuses the launch itself
            ref = None
            try:
                _warp_reference("cpu", 32)
            except Exception as e2:
                ref = e2
            assert ref is not None, f"the op failed where wp.launch_tiled did not: {e}"
            return
        np.testing.assert_array_equal(threads.numpy(), np.full(ROWS, 32))
        np.testing.assert_allclose(out.numpy(), _warp_reference("cpu", 32)[0], rtol=1e-6)
    finally:
        wp.config.enable_cpu_blocks = old
