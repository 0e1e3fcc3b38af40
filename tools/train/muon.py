"""Muon (momentum + Newton-Schulz orthogonalised updates) for 2-D weight matrices.

The update of each matrix is its Nesterov momentum pushed to the nearest semi-orthogonal
matrix by five Newton-Schulz iterations (the quintic with coefficients 3.4445, -4.7750,
2.0315, which converges to singular values in about [0.7, 1.2] rather than exactly 1:
cheaper, and as good for training), scaled by sqrt(max(1, rows / cols)) so tall and
wide matrices move alike. Matrices of the same shape are orthogonalised as one batch.
Embeddings, the output head, norms, scalars and 3-D tensors belong to AdamW (the caller
splits the parameters), as in the NAM56R recipe."""

import torch


def newton_schulz5(G, steps=5, eps=1e-7):
    """G [..., m, n] -> approximately U V^T of G's SVD (bf16 inside)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G.to(torch.bfloat16)
    wide = X.size(-2) <= X.size(-1)
    if not wide:
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + eps)
    for _ in range(steps):
        A = X @ X.mT                                         # [m, n] x [n, m] -> [m, m]
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    if not wide:
        X = X.mT
    return X.to(G.dtype)


class Muon(torch.optim.Optimizer):
    def __init__(self, params, lr=0.02, momentum=0.95, weight_decay=0.0, nesterov=True):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            by_shape = {}
            for p in group["params"]:
                if p.grad is not None:
                    by_shape.setdefault(tuple(p.shape), []).append(p)
            for shape, ps in by_shape.items():
                grads = torch.stack([p.grad for p in ps])
                bufs = []
                for p in ps:
                    st = self.state[p]
                    if "momentum" not in st:
                        st["momentum"] = torch.zeros_like(p)
                    bufs.append(st["momentum"])
                buf = torch.stack(bufs)
                buf.mul_(group["momentum"]).add_(grads)
                g = grads.add(buf, alpha=group["momentum"]) if group["nesterov"] else buf
                o = newton_schulz5(g)
                scale = max(1.0, shape[0] / shape[1]) ** 0.5
                for i, p in enumerate(ps):
                    bufs[i].copy_(buf[i])
                    if group["weight_decay"]:
                        p.mul_(1 - group["lr"] * group["weight_decay"])
                    p.add_(o[i], alpha=-group["lr"] * scale)
