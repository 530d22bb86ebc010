"""The optimiser shared by the models trained on native gradients (``sequence``, ``language``)."""

from __future__ import annotations

import numpy as np


class Adam:
    """Adam (Kingma & Ba) on a dict of arrays, updated in place; with ``weight_decay``, AdamW's
    decoupled decay (Loshchilov & Hutter) of the parameters named in ``decay``."""

    def __init__(self, params, learning_rate=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decay=()):
        self.lr, (self.b1, self.b2), self.eps = learning_rate, betas, eps
        self.weight_decay, self.decay = weight_decay, set(decay)
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params, grads, lr=None):
        lr = self.lr if lr is None else lr
        self.t += 1
        c1, c2 = 1 - self.b1**self.t, 1 - self.b2**self.t
        for k, g in grads.items():
            m, v = self.m[k], self.v[k]
            m *= self.b1
            m += (1 - self.b1) * g
            v *= self.b2
            v += (1 - self.b2) * g * g
            if self.weight_decay and k in self.decay:
                params[k] *= params[k].dtype.type(1 - lr * self.weight_decay)
            params[k] -= (lr * (m / c1) / (np.sqrt(v / c2) + self.eps)).astype(params[k].dtype)
