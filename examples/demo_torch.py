"""Demo runner for PyTorch: forward eager and under torch.compile, gradients with autograd."""


class Unavailable(Exception):
    pass


def run(op, inputs):
    try:
        import torch
    except ImportError as e:  # pragma: no cover - demo.py checks find_spec first
        raise Unavailable(str(e)) from e
    x, v, a = inputs
    tx = torch.from_numpy(x.copy()).requires_grad_(True)
    tv = torch.from_numpy(v.copy()).requires_grad_(True)
    y, w = op(tx, tv, a)  # torch.ops.demo.wave under the hood
    (y.sum() + w.sum()).backward()
    # the same op inside torch.compile(fullgraph=True) gives the same values
    yc, wc = torch.compile(lambda x, v: op(x, v, a), fullgraph=True, backend="aot_eager")(tx, tv)
    assert torch.allclose(yc, y) and torch.allclose(wc, w)
    return {
        "outputs": [y.detach().numpy(), w.detach().numpy()],
        "grads": [tx.grad.numpy(), tv.grad.numpy()],
    }
