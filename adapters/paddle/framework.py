"""Paddle tensors as the core sees them: dtypes and places, pointers and strides, outputs allocated
by Paddle, the current stream; the argument checks that need a parameter's name."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import paddle

from interop import _dtypes
from interop._errors import ArgumentError
from interop._launch import external_stream
from interop._plan import ArraySpec

from .._common import EagerFramework
from .compat import empty as _empty
from .compat import zeros as _zeros

# ---- dtypes and places ------------------------------------------------------------------
_NP_OF_PADDLE: dict[Any, np.dtype] = {
    paddle.float16: np.dtype(np.float16),
    paddle.float32: np.dtype(np.float32),
    paddle.float64: np.dtype(np.float64),
    paddle.bfloat16: _dtypes.BFLOAT16,  # NumPy's stand-in: ml_dtypes.bfloat16
    paddle.int8: np.dtype(np.int8),
    paddle.int16: np.dtype(np.int16),
    paddle.int32: np.dtype(np.int32),
    paddle.int64: np.dtype(np.int64),
    paddle.uint8: np.dtype(np.uint8),
    paddle.bool: np.dtype(np.bool_),
}
_PADDLE_OF_NP: dict[np.dtype, Any] = {v: k for k, v in _NP_OF_PADDLE.items()}
# Warp's unsigned types travel as Paddle's signed types of the same width (as wp.to_paddle does)
_PADDLE_OF_NP.update(
    {np.dtype(np.uint16): paddle.int16, np.dtype(np.uint32): paddle.int32, np.dtype(np.uint64): paddle.int64}
)

_places: dict[str, Any] = {}


def _place(device: str):
    p = _places.get(device)
    if p is None:
        p = paddle.CPUPlace() if device == "cpu" else paddle.CUDAPlace(int(device.split(":")[1]))
        _places[device] = p
    return p


def _device_of_place(place) -> str | None:
    if place.is_gpu_place():
        return f"cuda:{place.gpu_device_id()}"
    if place.is_cpu_place():
        return "cpu"
    return None


def _current_stream(device: str):
    """Warp view of Paddle's current CUDA stream on ``device`` (the stream ``wp.stream_from_paddle`` gives)."""
    ps = paddle.device.current_stream(_place(device))
    return external_stream(device, int(ps.stream_base.cuda_stream))


class _Paddle(EagerFramework):
    name = "paddle"

    def is_array(self, x: Any) -> bool:
        return isinstance(x, paddle.Tensor)

    def spec(self, x) -> ArraySpec:
        return ArraySpec(tuple(x.shape), _NP_OF_PADDLE[x.dtype])

    def fast_key(self, args):
        return tuple(
            (tuple(a.shape), a.dtype, tuple(a.strides), a.place) if isinstance(a, paddle.Tensor) else type(a)
            for a in args
        )

    def ptr(self, x) -> int:
        return x.data_ptr()

    def layout(self, x):
        es = x.element_size()
        return x.data_ptr(), tuple(s * es for s in x.strides), es

    def device(self, x) -> str:
        return _device_of_place(x.place)

    def alloc(self, spec: ArraySpec, device: str, zero: bool, elem: Any = None):
        # Paddle's C ``full`` / ``empty``: the cheapest allocations it offers here
        return (_zeros if zero else _empty)(list(spec.shape), _PADDLE_OF_NP[spec.dtype], _place(device))

    def stream(self, device: str, arrays: Sequence[Any]) -> Any:
        if device == "cpu":
            return None
        return _current_stream(device)

    def default_device(self) -> str:
        d = paddle.device.get_device()  # "cpu" or "gpu:0"
        return d.replace("gpu", "cuda") if d.startswith("gpu") else "cpu"


FRAMEWORK = _Paddle()


# ---- argument checks that need the parameter name ------------------------------------------


def _check_args(op, args: Sequence[Any]) -> bool:
    """Reject symbolic values, unsupported dtypes and places, naming the parameter.

    Returns:
        whether some differentiable argument is a tensor with ``stop_gradient=False``.
    """
    desc = op.description
    params = desc.call_params  # a cached property: no hashing of the description per call
    needs_grad = False
    for p, x in zip(params, args):
        if not isinstance(x, paddle.Tensor):
            if type(x).__module__.split(".", 1)[0] == "paddle" and hasattr(x, "shape"):
                raise TypeError(
                    f"op {desc.label!r}, parameter {p.name!r}: got a symbolic Paddle value "
                    f"({type(x).__name__}): the op runs Warp kernels on memory and cannot be part of a static "
                    "Paddle graph (paddle.jit.to_static(full_graph=True) or paddle.enable_static()); use "
                    "paddle.jit.to_static(full_graph=False), where the op runs eagerly between compiled parts"
                )
            continue
        if x.is_sparse():
            raise ArgumentError(
                f"op {desc.label!r}, parameter {p.name!r}: a sparse Paddle tensor has no dense strided memory a "
                "Warp kernel can read; pass a dense tensor (.to_dense())"
            )
        if x.dtype not in _NP_OF_PADDLE:
            raise ArgumentError(
                f"op {desc.label!r}, parameter {p.name!r}: expected {p.expected_text()}, got a Paddle tensor of "
                f"dtype {x.dtype} (not supported by Warp)"
            )
        place = x.place
        if not (place.is_cpu_place() or place.is_gpu_place()):
            raise ValueError(
                f"op {desc.label!r}, parameter {p.name!r}: the tensor is on {place}; Warp runs on the CPU and "
                "CUDA GPUs only: move it with .cpu() or .cuda()"
            )
        if p.differentiable and not x.stop_gradient:
            needs_grad = True
    return needs_grad
