"""Zero-copy array exchange between NumPy, Warp, PyTorch, JAX, Paddle and CuPy."""

from __future__ import annotations

import importlib
from typing import Any

from . import _dtypes
from ._errors import ArgumentError
from ._frameworks import FRAMEWORKS, data_ptr, framework_of
from ._runtime import ensure_init


def _size(x: Any) -> int:
    s = getattr(x, "size", None)
    if callable(s):  # torch: size() is the shape
        s = x.numel()
    if s is None:
        return 1
    try:
        return int(s)
    except TypeError:
        n = 1
        for d in x.shape:
            n *= int(d)
        return n


def _dtype_name(x: Any) -> str:
    """Scalar dtype name of any framework's array (``float32``); vec/mat Warp arrays give their scalar."""
    if framework_of(x) == "warp":
        return _dtypes.np_dtype(_dtypes.split(x.dtype)[0]).name
    return str(x.dtype).rsplit(".", 1)[-1]


def _check_view(x: Any, fw: str, dtype: Any) -> None:
    """``dtype=`` must reinterpret ``x`` exactly: same scalar type, trailing dims equal to its vec/mat shape."""
    scalar, inner = _dtypes.split(dtype)
    if scalar not in _dtypes._WP_TO_NP:
        raise ArgumentError(f"convert: dtype= must be a Warp scalar, vector or matrix type, got {dtype!r}")
    shape = tuple(int(s) for s in x.shape)
    if fw == "warp":
        shape += _dtypes.split(x.dtype)[1]
    want = _dtypes.np_dtype(scalar).name
    if _dtype_name(x) != want or len(shape) <= len(inner) or shape[len(shape) - len(inner) :] != inner:
        raise ArgumentError(
            f"convert: dtype={_dtypes.type_name(dtype)} views an array of {want} whose trailing dims are {inner} "
            f"(e.g. (n, {', '.join(map(str, inner))})), got a {fw} array of shape {shape} and dtype {_dtype_name(x)}"
            if inner
            else f"convert: dtype={_dtypes.type_name(dtype)} views an array of {want}, got a {fw} array of "
            f"dtype {_dtype_name(x)}; arrays are never cast"
        )


def _strides(x: Any, fw: str) -> tuple:
    """Strides of ``x`` (any unit: only their signs are used); () where the framework has none."""
    if fw == "torch":
        return tuple(x.stride()) if str(x.layout) == "torch.strided" else ()
    st = getattr(x, "strides", None)
    if fw == "jax" or st is None or callable(st):
        return ()
    return tuple(int(v) for v in st)


def _detach(x: Any, fw: str) -> Any:
    # DLPack refuses tensors that require grad (torch) or are trainable (Paddle's
    # stop_gradient=False); the detached view shares memory and leaves the caller's tensor as it was
    if fw == "torch" and x.requires_grad:
        return x.detach()
    if fw == "paddle" and not x.stop_gradient:
        return x.detach()
    return x


def _torch_memory(x: Any, to: str, copy: bool) -> Any:
    """``x`` if its memory holds its values, else an error naming why (or, with ``copy``, the values
    in new memory): a nested or sparse tensor has no one strided block; a tensor with torch's
    negative or conjugate bit set (a lazy view such as ``z.conj().imag``) holds other values than
    its own, which DLPack would hand over as they are."""
    import torch

    if x.is_nested or x.layout != torch.strided:
        raise ArgumentError(
            f"convert: a {'nested' if x.is_nested else str(x.layout)} torch tensor has no dense strided memory "
            f"to hand to {to}; convert a dense tensor (.to_dense())"
        )
    if x.is_neg() or x.is_conj():
        if copy:
            return x.resolve_neg().resolve_conj()
        raise ArgumentError(
            f"convert: a torch array of shape {tuple(x.shape)} cannot be handed to {to} without a copy (it has "
            f"torch's {'negative' if x.is_neg() else 'conjugate'} bit set: its memory holds other values than "
            "the tensor's); pass copy=True to allow one, or call x.resolve_neg() / x.resolve_conj()"
        )
    return x


def _is_bf16(x: Any, fw: str) -> bool:
    return _dtype_name(x) == "bfloat16"


def _to_numpy(x: Any, fw: str):
    import numpy as np

    if fw == "numpy":
        return x
    if fw == "warp":
        if not x.device.is_cpu:
            raise ArgumentError("array is on " + str(x.device))
        return x.numpy()  # an ml_dtypes.bfloat16 view for bfloat16
    if _is_bf16(x, fw):
        # NumPy's DLPack import knows no bfloat16; Warp's does, and its .numpy() is an ml_dtypes view
        return _to_numpy(_to_warp(x, fw, None), "warp")
    if fw == "torch":
        return x.detach().numpy()
    return np.from_dlpack(x)


def _to_torch(x: Any, fw: str):
    import numpy as np
    import torch

    if fw == "torch":
        return x
    if fw == "numpy":
        if x.dtype == _dtypes.BFLOAT16:  # torch.from_numpy knows no ml_dtypes.bfloat16: same bits as int16
            return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(x)
    return torch.from_dlpack(x)


class _DLPackDevice:
    """A DLPack producer whose ``__dlpack_device__`` is a plain ``(int, int)``.

    Paddle 3.3 reports ``(kDLCPU, None)`` on the CPU, which JAX's ``from_dlpack`` rejects;
    the capsule itself still comes from (and keeps alive) the original tensor.
    """

    __slots__ = ("_x", "_device")

    def __init__(self, x: Any):
        self._x = x
        kind, index = x.__dlpack_device__()
        self._device = (int(kind), int(index or 0))

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, *args: Any, **kwargs: Any):
        return self._x.__dlpack__(*args, **kwargs)


def _to_jax(x: Any, fw: str):
    import jax.numpy as jnp

    if fw == "jax":
        return x
    if fw == "numpy" and x.dtype == _dtypes.BFLOAT16:
        x = _to_warp(x, fw, None)  # NumPy's DLPack export knows no bfloat16; Warp's does
    if fw == "paddle":
        x = _DLPackDevice(x)
    return jnp.from_dlpack(x)


def _to_paddle(x: Any, fw: str):
    import paddle

    if fw == "paddle":
        return x
    if fw == "numpy" and x.dtype == _dtypes.BFLOAT16:
        x = _to_warp(x, fw, None)  # NumPy's DLPack export knows no bfloat16; Warp's does
    return paddle.from_dlpack(x) if hasattr(paddle, "from_dlpack") else paddle.utils.dlpack.from_dlpack(x)


def _to_cupy(x: Any, fw: str):
    import cupy

    if fw == "cupy":
        return x
    # DLPack for every producer, Warp included: cupy.from_dlpack passes CuPy's current stream to
    # __dlpack__, and the producer orders it after its own pending work (Warp's
    # __cuda_array_interface__ is version 2: no stream, so nothing would be ordered)
    return cupy.from_dlpack(x)


def _to_warp(x: Any, fw: str, dtype: Any):
    import warp as wp

    ensure_init()
    if fw == "warp":
        if dtype is None or dtype == x.dtype:
            return x
        return x.view(dtype) if hasattr(x, "view") else wp.from_dlpack(x, dtype=dtype)
    if fw == "numpy":
        if dtype is None:
            dtype = _dtypes.wp_scalar(x.dtype)
            if dtype is None:
                raise TypeError(f"NumPy dtype {x.dtype} has no Warp equivalent")
        return wp.array(x, dtype=dtype, device="cpu", copy=False)
    return wp.from_dlpack(x, dtype=dtype) if dtype is not None else wp.from_dlpack(x)


_TARGETS = {
    "numpy": _to_numpy,
    "torch": _to_torch,
    "jax": _to_jax,
    "paddle": _to_paddle,
    "cupy": _to_cupy,
}


def convert(x: Any, to: str, *, dtype: Any = None, copy: bool = False) -> Any:
    """Hand array ``x`` to another framework without copying it.

    Uses DLPack (``__dlpack__`` with the consumer's stream, so CUDA work stays ordered),
    ``__array_interface__`` or ``__cuda_array_interface__``. The result shares memory
    with ``x`` and lives on the same device. A PyTorch tensor that requires grad, or a
    Paddle tensor with ``stop_gradient=False``, is detached (the view shares memory;
    autograd history does not cross frameworks).

    Args:
        x: a NumPy, Warp, PyTorch, JAX, Paddle or CuPy array.
        to: ``"numpy"``, ``"warp"``, ``"torch"``, ``"jax"``, ``"paddle"`` or ``"cupy"``.
        dtype: only with ``to="warp"``: the Warp element type to view the data as, e.g.
            ``wp.vec3`` for an ``(n, 3)`` float32 array (gives an ``(n,)`` array of vec3).
        copy: allow a copy when a zero-copy exchange is impossible (e.g. a CUDA array to
            NumPy, or an array XLA cannot alias). The source framework copies the array on
            its own device (to the host for ``to="numpy"``), then the copy is handed over
            zero-copy: the result stays on the array's device, or the call raises where
            ``to`` cannot hold arrays there (a CPU array to CuPy, a CUDA array to a CPU-only
            build). Default False: raise instead.

    Returns:
        The array in framework ``to``.

    Raises:
        ValueError: ``to`` is unknown, or the exchange would copy and ``copy`` is False.
        TypeError: ``x`` is not a supported array, or ``dtype`` is given for a target other than Warp.

    Example:
        >>> import numpy as np, warp as wp, interop
        >>> b = np.zeros((4, 3), np.float32)
        >>> w = interop.convert(b, to="warp", dtype=wp.vec3)
        >>> w.shape, w.dtype is wp.vec3
        ((4,), True)
    """
    if to not in FRAMEWORKS:
        raise ArgumentError(f"convert: to must be one of {FRAMEWORKS}, got {to!r}")
    fw = framework_of(x)
    if fw is None or fw == "unsupported":
        raise ArgumentError(
            f"convert: x must be a NumPy, Warp, PyTorch, JAX, Paddle or CuPy array, got {type(x).__module__}."
            f"{type(x).__qualname__}"
        )
    if dtype is not None and to != "warp":
        raise ArgumentError(f"convert: dtype= applies only to to='warp' (a Warp element type), got to={to!r}")
    if dtype is not None:
        _check_view(x, fw, dtype)
    try:
        importlib.import_module(to if to != "paddle" else "paddle")
    except ImportError as e:
        raise ImportError(f"convert: to={to!r} needs {to} installed ({e})") from e
    src = _detach(x, fw)
    if to == fw and dtype is None:
        return src  # the same framework: the array itself (detached)
    if fw == "torch":
        src = _torch_memory(src, to, copy)
    error: Exception | None = None
    out = None
    if to != fw and any(s < 0 for s in _strides(src, fw)):
        # DLPack consumers do not all handle negative strides (Paddle aborts or tries to allocate
        # 2**64 bytes): never hand them such a view
        error = ValueError(f"it has negative strides {_strides(src, fw)}, which {to} cannot view")
    else:
        try:
            out = _to_warp(src, fw, dtype) if to == "warp" else _TARGETS[to](src, fw)
        except Exception as e:  # the framework refused a zero-copy exchange
            out, error = None, e
    if out is not None and _dtype_name(out) != _dtype_name(src):
        hint = ""
        if to == "jax":
            hint = " (JAX has 64-bit types disabled: jax.config.update('jax_enable_x64', True) or jax.enable_x64())"
        raise ArgumentError(
            f"convert: {to} would change the dtype of a {fw} array from {_dtype_name(src)} to "
            f"{_dtype_name(out)}{hint}; arrays are never cast"
        )
    if out is not None and _size(src) > 0 and data_ptr(out) != data_ptr(src):
        if copy:
            return out  # the copy the caller allowed, already made by the target framework
        why = "the target framework made a copy"
        if to == "jax" and data_ptr(src) % 64:
            why += f": XLA only aliases 64-byte aligned CPU buffers, this one starts {data_ptr(src) % 64} bytes past"
        error = ValueError(why)
    if error is None:
        return out
    if not copy:
        raise ArgumentError(
            f"convert: a {fw} array of shape {tuple(x.shape)} cannot be handed to {to} without a copy "
            f"({error}); pass copy=True to allow one"
        ) from (error if not isinstance(error, ValueError) else None)
    return _copied(src, fw, to, dtype)


def _device_of(x: Any, fw: str) -> str:
    """``"cpu"`` or ``"cuda:<n>"``: where array ``x`` of framework ``fw`` lives."""
    if fw == "numpy":
        return "cpu"
    if fw == "warp":
        return str(x.device)
    if fw == "torch":
        return "cpu" if x.device.type == "cpu" else f"cuda:{x.device.index or 0}"
    if fw == "jax":
        (d,) = x.devices()
        return "cpu" if d.platform == "cpu" else f"cuda:{getattr(d, 'local_hardware_id', d.id)}"
    if fw == "paddle":
        return f"cuda:{x.place.gpu_device_id()}" if x.place.is_gpu_place() else "cpu"
    if type(x).__module__.split(".", 1)[0] == "cupy":
        return f"cuda:{x.device.id}"
    import cupy  # another __cuda_array_interface__ producer: CUDA asks where its pointer lives

    ptr = int(x.__cuda_array_interface__["data"][0] or 0)
    return f"cuda:{cupy.cuda.runtime.pointerGetAttributes(ptr).device if ptr else cupy.cuda.runtime.getDevice()}"


def _host_copy(x: Any, fw: str):
    """A NumPy copy of ``x`` in new host memory, made by its own framework (device to host where
    it lives on a GPU)."""
    import numpy as np

    if fw == "warp":
        return np.array(x.numpy(), copy=True)  # .numpy() copies a CUDA array to the host
    if fw == "torch":
        return np.array(_to_numpy(x.detach().cpu(), "torch"), copy=True)
    if fw == "paddle":
        if _is_bf16(x, fw):  # Paddle's .numpy() of bfloat16 gives the raw bits; float32 holds the values
            return x.astype("float32").numpy().astype(_dtypes.BFLOAT16)
        return np.array(x.numpy(), copy=True)
    if fw == "cupy":
        import cupy

        return cupy.asnumpy(cupy.asarray(x))
    return np.array(x, copy=True)  # NumPy, JAX (np.array of a GPU array copies it to the host)


def _device_copy(x: Any, fw: str):
    """A contiguous copy of ``x`` on its own device, made by its own framework (on that
    framework's current stream)."""
    import numpy as np

    if fw == "numpy":
        return np.array(x, copy=True, order="C")
    if fw == "warp":
        import warp as wp

        return wp.clone(x)
    if fw == "torch":
        import torch

        return x.clone(memory_format=torch.contiguous_format)
    if fw == "jax":
        import jax.numpy as jnp

        return jnp.array(x, copy=True)
    if fw == "paddle":
        return x.clone()
    import cupy

    with cupy.cuda.Device(int(_device_of(x, fw).split(":")[1])):
        return cupy.array(x, copy=True)


def _copied(src: Any, fw: str, to: str, dtype: Any) -> Any:
    """What ``copy=True`` gives when the zero-copy exchange failed: a copy on the array's own
    device (NumPy, host-only, gets a host copy), handed to ``to`` without another copy."""
    device = _device_of(src, fw)
    if to == "numpy":
        out = _host_copy(src, fw)
    else:
        if to == "cupy" and device == "cpu":
            raise ArgumentError(
                f"convert: a {fw} array on cpu cannot become a CuPy array (CuPy arrays live on CUDA devices, and "
                "copy=True copies on the array's own device); move it to a GPU first, e.g. cupy.asarray(x)"
            )
        fresh = _device_copy(src, fw)
        try:
            out = _to_warp(fresh, fw, dtype) if to == "warp" else _TARGETS[to](fresh, fw)
        except Exception as e:
            raise ArgumentError(
                f"convert: a {fw} array on {device} cannot be handed to {to}, not even as a copy on {device} ({e})"
            ) from e
        got = _device_of(out, to if to != "warp" else "warp")
        if got.split(":")[0] != device.split(":")[0]:  # pragma: no cover - a framework moving data itself
            raise ArgumentError(f"convert: copying a {fw} array on {device} to {to} gave an array on {got}")
    if _dtype_name(out) != _dtype_name(src):  # e.g. a bfloat16 tensor read back as its uint16 bits
        raise ArgumentError(
            f"convert: copying a {fw} array of dtype {_dtype_name(src)} to {to} would give dtype "
            f"{_dtype_name(out)}; arrays are never cast"
        )
    return out
