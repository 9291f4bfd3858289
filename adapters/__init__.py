"""warp-interop adapters: one module per framework (numpy, warp, torch, jax, paddle, cupy).

Each module binds the framework-independent op description of :mod:`interop` to one
framework and is imported lazily, the first time an array of that framework is seen.
An adapter module provides:

- ``call(op, args, launch_dims, output_dims, kwargs)``: run the op on that framework's arrays;
- ``bind(op)``: the op bound to the framework (e.g. the registered torch operator);
- optionally ``on_describe(op)``: called when an op is described while the framework is
  already imported (PyTorch registers its operator there, before any tracing).
"""

__all__: list[str] = []
