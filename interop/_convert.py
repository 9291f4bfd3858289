"""Zero-copy array exchange between NumPy, Warp, PyTorch, JAX, Paddle and CuPy."""

from __future__ import annotations

import importlib
import sys
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
    """Scalar dtype name of any framework's array (``float32``); vec/mat Warp arrays give their scalar,
    struct arrays and NumPy structured arrays their fields (``[('a', '<f4'), ('b', '<i4')]``)."""
    fw = framework_of(x)
    if fw in ("warp", "numpy"):
        d = _dtypes.np_dtype(_dtypes.split(x.dtype)[0]) if fw == "warp" else x.dtype
        return d.name if d.fields is None else str(d)
    return str(x.dtype).rsplit(".", 1)[-1]


def _full_shape(x: Any, fw: str) -> tuple:
    """Shape of ``x`` with a Warp vec/mat element's dims appended: the same in every framework."""
    shape = tuple(int(s) for s in x.shape)
    return shape + _dtypes.split(x.dtype)[1] if fw == "warp" else shape


# same-size types Warp's DLPack import views one as the other (bool as bytes, signed as unsigned)
_ALIASES = {"bool": ("int8", "uint8")} | {
    f"{a}int{n}": (f"{b}int{n}",) for n in (8, 16, 32, 64) for a, b in (("", "u"), ("u", ""))
}


def _check_view(x: Any, fw: str, dtype: Any) -> None:
    """``dtype=`` must reinterpret ``x`` exactly: same scalar type, trailing dims equal to its vec/mat shape."""
    scalar, inner = _dtypes.split(dtype)
    if scalar not in _dtypes._WP_TO_NP:
        raise ArgumentError(f"convert: dtype= must be a Warp scalar, vector or matrix type, got {dtype!r}")
    shape = _full_shape(x, fw)
    want = _dtypes.np_dtype(scalar).name
    views = (want,) + tuple(k for k, v in _ALIASES.items() if want in v)
    if _dtype_name(x) not in views or len(shape) <= len(inner) or shape[len(shape) - len(inner) :] != inner:
        of = " or ".join(views)
        raise ArgumentError(
            f"convert: dtype={_dtypes.type_name(dtype)} views an array of {of} whose trailing dims are {inner} "
            f"(e.g. (n, {', '.join(map(str, inner))})), got a {fw} array of shape {shape} and dtype {_dtype_name(x)}"
            if inner
            else f"convert: dtype={_dtypes.type_name(dtype)} views an array of {of}, got a {fw} array of "
            f"dtype {_dtype_name(x)}; arrays are never cast (only bool is viewed as int8/uint8, and a signed "
            "integer as the unsigned one of its size, or back)"
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


def _bf16_via_warp(x: Any, fw: str):
    """A Warp view of bfloat16 array ``x`` (NumPy's DLPack knows no bfloat16; Warp's does). Warp has no
    0-d arrays: a 0-d ``x`` goes as its 1-element view (``x[None]``), and the caller reshapes it back."""
    return _to_warp(x[None] if len(x.shape) == 0 else x, fw, None)


def _to_numpy(x: Any, fw: str):
    import numpy as np

    if fw == "numpy":
        return x
    if fw == "warp":
        if not x.device.is_cpu:
            raise ArgumentError("array is on " + str(x.device))
        return x.numpy()  # an ml_dtypes.bfloat16 view for bfloat16, a structured view for structs
    if _is_bf16(x, fw):  # NumPy's DLPack import knows no bfloat16
        if fw == "torch":
            import torch

            return x.detach().view(torch.int16).numpy().view(_dtypes.BFLOAT16)  # the same bits
        if fw == "jax" and all(d.platform == "cpu" for d in x.devices()):
            return np.asarray(x)  # JAX's own (read-only) ml_dtypes view of its host buffer
        return _to_numpy(_bf16_via_warp(x, fw), "warp").reshape(tuple(x.shape))
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
        out = jnp.from_dlpack(_bf16_via_warp(x, fw))
        return out.reshape(()) if x.ndim == 0 else out  # (JAX's reshape copies: the caller sees it)
    if fw == "paddle":
        x = _DLPackDevice(x)
    return jnp.from_dlpack(x)


def _to_paddle(x: Any, fw: str):
    import paddle

    if fw == "paddle":
        return x
    from_dlpack = paddle.from_dlpack if hasattr(paddle, "from_dlpack") else paddle.utils.dlpack.from_dlpack
    if fw == "numpy" and x.dtype == _dtypes.BFLOAT16:
        out = from_dlpack(_bf16_via_warp(x, fw))
        return out.squeeze(0) if x.ndim == 0 else out  # a view
    return from_dlpack(x)


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
        scalar = _dtypes.np_dtype(_dtypes.split(dtype)[0])
        if x.dtype != scalar:  # a same-size alias (bool as uint8): wp.array would cast, NumPy views
            x = x.view(scalar)
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
            ``wp.vec3`` for an ``(n, 3)`` float32 array (gives an ``(n,)`` array of vec3). Its
            scalar type is the array's, or a same-size alias Warp's DLPack makes: ``bool`` as
            ``int8``/``uint8``, a signed integer as the unsigned one of its size, or back.
        copy: allow a copy when a zero-copy exchange is impossible (e.g. a CUDA array to
            NumPy, an array XLA cannot alias, a JAX array sharded over several devices, which
            is gathered onto the first device of its sharding). The source framework copies
            the array on its own device (to the host for ``to="numpy"``), then the copy is
            handed over zero-copy: the result stays on the array's device, or the call raises
            where ``to`` cannot hold arrays there (a CPU array to CuPy, a CUDA array to a
            CPU-only build). Default False: raise instead.

    Returns:
        The array in framework ``to``, of ``x``'s shape (a 0-d array stays 0-d).

    Raises:
        ValueError: ``to`` is unknown, or the exchange would copy and ``copy`` is False, or no
            copy would help either (the message says why, without suggesting ``copy=True``): a
            0-d array to Warp (Warp arrays have at least one dimension), a dtype ``to`` has no
            arrays of, a deleted JAX array, a NumPy masked array with masked elements.
        TypeError: ``x`` is not a supported array, or ``dtype`` is given for a target other than Warp.

    Example:
        >>> import numpy as np, warp as wp, interop
        >>> b = np.zeros((4, 3), np.float32)
        >>> w = interop.convert(b, to="warp", dtype=wp.vec3)
        >>> w.shape, w.dtype is wp.vec3
        ((4,), True)
    """
    fw = _source(x, to, dtype)
    src = _detach(x, fw)
    if to == fw and dtype is None:
        return src  # the same framework: the array itself (detached)
    if fw == "torch":
        src = _torch_memory(src, to, copy)  # first: a nested tensor has no shape
    _refuse_unconvertible(src, fw, to)
    if dtype is not None:
        _check_view(src, fw, dtype)
    out, error = _exchange(src, fw, to, dtype)
    if error is None or (copy and out is not None):
        return out  # the view, or the copy the caller allowed (already made by the target framework)
    if not copy:
        raise ArgumentError(
            f"convert: a {fw} array of shape {tuple(x.shape)} cannot be handed to {to} without a copy "
            f"({error}); pass copy=True to allow one"
        ) from (error if not isinstance(error, ValueError) else None)
    return _copied(src, fw, to, dtype)


def _source(x: Any, to: str, dtype: Any) -> str:
    """The framework of ``x``, once ``to`` and ``dtype`` are known to be valid and ``to`` is importable."""
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
    try:
        importlib.import_module(to)
    except ImportError as e:
        raise ImportError(f"convert: to={to!r} needs {to} installed ({e})") from e
    return fw


def _refuse_unconvertible(x: Any, fw: str, to: str) -> None:
    """Refuse, naming why, an array that no exchange hands to ``to`` as it is, copying or not."""
    ma = sys.modules.get("numpy.ma")  # no masked array exists before numpy.ma is imported
    if fw == "numpy" and ma is not None and isinstance(x, ma.MaskedArray) and ma.getmask(x).any():
        raise ArgumentError(
            f"convert: a NumPy masked array with masked elements cannot be handed to {to}: {to} arrays have no "
            "mask, so the masked-out values would show; pass x.filled(value) (or x.data)"
        )
    if fw == "jax" and getattr(x, "is_deleted", lambda: False)():
        raise ArgumentError(
            f"convert: a jax array of shape {tuple(x.shape)} has been deleted (x.delete(), or donated to a jitted "
            f"function): it has no memory left to hand to {to}"
        )
    if to == "warp" and len(x.shape) == 0:
        raise ArgumentError(
            f"convert: a 0-d {fw} array cannot be handed to warp: Warp arrays have at least one dimension; "
            "pass x[None] for an array of shape (1,)"
        )


def _exchange(src: Any, fw: str, to: str, dtype: Any) -> tuple[Any, Exception | None]:
    """The zero-copy exchange: ``(view, None)``; ``(None, why)`` where a copy may work; ``(copy, why)``
    where the target framework made a copy. Raises where no copy would help (a dtype ``to`` lacks)."""
    if to != fw and any(s < 0 for s in _strides(src, fw)):
        # DLPack consumers do not all handle negative strides (Paddle aborts or tries to allocate
        # 2**64 bytes): never hand them such a view
        return None, ValueError(f"it has negative strides {_strides(src, fw)}, which {to} cannot view")
    if fw == "jax" and len(src.devices()) > 1:
        n = len(src.devices())
        return None, ValueError(f"it is sharded over {n} devices, and {to} views one device's memory")
    if to == "jax" and _size(src) > 0 and data_ptr(src) % 64 and _device_of(src, fw) == "cpu":
        # XLA would copy it: not handed over (a copy XLA's CPU client made from a foreign buffer left
        # the process hanging at exit, jax 0.10.2); convert(copy=True) copies it first
        off = data_ptr(src) % 64
        return None, ValueError(f"XLA only aliases 64-byte aligned CPU buffers, this one starts {off} bytes past")
    try:
        out = _to_warp(src, fw, dtype) if to == "warp" else _TARGETS[to](src, fw)
    except Exception as e:  # the framework refused a zero-copy exchange
        reason = _dtype_lacking(src, fw, to)
        if reason is not None:
            raise ArgumentError(
                f"convert: a {fw} array of dtype {_dtype_name(src)} cannot be handed to {to}, not even as a copy: "
                f"{reason}"
            ) from e
        return None, e
    _check_kept(src, fw, out, to, dtype)
    if _size(src) > 0 and data_ptr(out) != data_ptr(src):
        why = "the target framework made a copy"
        if to == "jax" and data_ptr(src) % 64:
            why += f": XLA only aliases 64-byte aligned CPU buffers, this one starts {data_ptr(src) % 64} bytes past"
        return out, ValueError(why)
    return out, None


_WARP_DTYPES = sorted({d.name for d in _dtypes._WP_TO_NP.values()})


def _dtype_lacking(x: Any, fw: str, to: str) -> str | None:
    """Why ``to`` has no arrays of ``x``'s dtype (so no copy helps either), or None."""
    name = _dtype_name(x)
    if to == "warp" and name not in _WARP_DTYPES:
        return f"Warp has no arrays of {name} (its scalar types: {', '.join(_WARP_DTYPES)})"
    if fw == "warp" and _dtypes.split(x.dtype)[0] not in _dtypes._WP_TO_NP:
        return "DLPack has no form for an array of Warp structs; to='numpy' views it as a structured array"
    if fw == "numpy" and x.dtype.kind not in "biufc" and x.dtype != _dtypes.BFLOAT16:
        return f"DLPack, and {to}, have no arrays of NumPy dtype {name}"
    return None


def _check_kept(src: Any, fw: str, out: Any, to: str, dtype: Any) -> None:
    """``out`` has ``src``'s dtype (or the one ``dtype=`` views it as) and shape: arrays are never cast."""
    want = _dtypes.np_dtype(_dtypes.split(dtype)[0]).name if dtype is not None else _dtype_name(src)
    if _dtype_name(out) != want:  # e.g. float64 to JAX without x64, a bfloat16 read back as its bits
        hint = ""
        if to == "jax":
            hint = " (JAX has 64-bit types disabled: jax.config.update('jax_enable_x64', True) or jax.enable_x64())"
        raise ArgumentError(
            f"convert: {to} would change the dtype of a {fw} array from {want} to {_dtype_name(out)}{hint}; "
            "arrays are never cast"
        )
    if _full_shape(out, to) != _full_shape(src, fw):
        raise ArgumentError(
            f"convert: {to} would change the shape of a {fw} array from {_full_shape(src, fw)} to "
            f"{_full_shape(out, to)}; arrays are never reshaped"
        )


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
    device (NumPy, host-only, gets a host copy), handed to ``to`` without another copy. A JAX
    array sharded over several devices is gathered onto the first device of its sharding."""
    if to == "numpy":
        out = _host_copy(src, fw)  # (np.array gathers a sharded JAX array itself)
    else:
        if fw == "jax" and len(src.devices()) > 1:
            src = _gathered(src, to)
        device = _device_of(src, fw)
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
    _check_kept(src, fw, out, to, dtype)  # e.g. a bfloat16 tensor read back as its uint16 bits
    return out


def _gathered(x: Any, to: str) -> Any:
    """JAX array ``x``, sharded over several devices, gathered onto the first device of its sharding."""
    import jax

    if not x.is_fully_addressable:  # pragma: no cover - needs several processes
        raise ArgumentError(
            f"convert: a jax array sharded over devices of other processes cannot be handed to {to}; gather it "
            "first (jax.experimental.multihost_utils.process_allgather(x))"
        )
    return jax.device_put(x, x.addressable_shards[0].device)
