"""Demo runner for CuPy: forward only (CuPy has no autograd); needs CuPy and a CUDA GPU."""

import importlib.util


class Unavailable(Exception):
    pass


def run(op, inputs):
    if importlib.util.find_spec("cupy") is None:
        raise Unavailable("CuPy is not installed")
    import cupy as cp

    try:
        if cp.cuda.runtime.getDeviceCount() == 0:
            raise Unavailable("no CUDA GPU")
    except cp.cuda.runtime.CUDARuntimeError as e:
        raise Unavailable(f"no usable CUDA GPU ({e})") from None
    x, v, a = inputs
    y, w = op(cp.asarray(x), cp.asarray(v), a)
    assert isinstance(y, cp.ndarray)
    return {"outputs": [cp.asnumpy(y), cp.asnumpy(w)], "grads": None}
