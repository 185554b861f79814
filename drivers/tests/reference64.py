"""An fp64 re-implementation of recap's model math and training step, independent of
recap_drivers.layers: plain torch ops in float64 (matmul, exp, tanh, ...), no checkpoint, no
F.layer_norm/F.dropout, gradients by autograd. Dropout masks come from the run under test (as
recap's fp64 reference takes them from the RNG ledger): mask(layer, op, microbatch) -> 0/1 tensor.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List

import torch

D = torch.float64
EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)

MaskFn = Callable[[str, str, int], torch.Tensor]


class Ref:
    def __init__(self, case: dict, params: Dict[str, torch.Tensor]):
        self.case = case
        self.hidden = case.get("hidden", 16)
        self.tokens = case.get("tokens", 8)
        self.p = {k: v.detach().to(D).clone().requires_grad_(True) for k, v in params.items()}

    # ops
    def linear(self, x, name, bias=True):
        y = x @ self.p[name + ".weight"].t()
        if bias:
            y = y + self.p[name + ".bias"]
        return y

    def layernorm(self, x, name):
        mu = x.mean(dim=-1, keepdim=True)
        var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + EPS) * self.p[name + ".weight"] + self.p[name + ".bias"]

    def rmsnorm(self, x, name):
        return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + EPS) * self.p[name + ".weight"]

    @staticmethod
    def gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(GELU_C * (x + 0.044715 * x * x * x)))

    def dropout(self, x, layer, op, prob, masks: MaskFn, mb):
        if prob == 0.0:
            return x
        m = masks(layer, op, mb).to(D).reshape(x.shape)
        return x * m * (1.0 / (1.0 - prob))

    def attn_core(self, qkv, layer, heads, prob, masks, mb):
        T, H = qkv.shape[0], self.hidden
        dh = H // heads
        outs = []
        m = masks(layer, "attn_dropout", mb).to(D).reshape(heads, T, T) if prob > 0 else None
        causal = torch.tensor([[j > i for j in range(T)] for i in range(T)])
        for h in range(heads):
            q = qkv[:, h * dh:(h + 1) * dh]
            k = qkv[:, H + h * dh:H + (h + 1) * dh]
            v = qkv[:, 2 * H + h * dh:2 * H + (h + 1) * dh]
            s = (q @ k.t()) * (1.0 / math.sqrt(dh))
            s = torch.where(causal, torch.full_like(s, -math.inf), s)
            e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
            P = e / e.sum(dim=-1, keepdim=True)
            if m is not None:
                P = P * m[h] * (1.0 / (1.0 - prob))
            outs.append(P @ v)
        return torch.cat(outs, dim=1)

    def attention(self, x, path, heads, prob, masks, mb):
        a = self.linear(x, path + ".qkv")
        a = self.attn_core(a, path + ".core", heads, prob, masks, mb)
        return self.linear(a, path + ".proj")

    def mlp(self, x, path, prob, masks, mb):
        a = self.gelu(self.linear(x, path + ".fc1"))
        a = self.linear(a, path + ".fc2")
        return self.dropout(a, path + ".dropout", "dropout", prob, masks, mb)

    def forward(self, x, masks: MaskFn, mb: int):
        for i, l in enumerate(self.case["layers"]):
            k = l["kind"]
            name = f"{k}{i}"
            prob = float(torch.tensor(l.get("dropout", 0.0), dtype=torch.float32))
            heads = l.get("heads", 1)
            if k == "linear":
                x = self.linear(x, name)
            elif k == "layernorm":
                x = self.layernorm(x, name)
            elif k == "rmsnorm":
                x = self.rmsnorm(x, name)
            elif k == "gelu":
                x = self.gelu(x)
            elif k == "dropout":
                x = self.dropout(x, name, "dropout", prob, masks, mb)
            elif k == "swiglu":
                g = self.linear(x, name + ".gate", False)
                u = self.linear(x, name + ".up", False)
                x = self.linear(g / (1.0 + torch.exp(-g)) * u, name + ".down", False)
            elif k == "attention":
                x = self.attention(x, name, heads, prob, masks, mb)
            elif k == "mlp":
                x = self.mlp(x, name, prob, masks, mb)
            elif k == "block":
                a = self.attention(self.layernorm(x, name + ".ln1"), name + ".attn", heads, prob, masks, mb)
                h = x + self.dropout(a, name + ".drop1", "dropout", prob, masks, mb)
                x = h + self.mlp(self.layernorm(h, name + ".ln2"), name + ".mlp", prob, masks, mb)
            else:
                raise ValueError(k)
        return x

    def step(self, inputs: List[torch.Tensor], targets: List[torch.Tensor], order: List[int], lr: float,
             masks: MaskFn):
        """One training step; returns (losses, grads after each microbatch's backward, params after)."""
        for v in self.p.values():
            v.grad = None
        M = len(inputs)
        losses: List[Any] = [None] * M
        grads: List[Any] = [None] * M
        f = b = 0
        for e in order:
            if e > 0:
                y = self.forward(inputs[f].to(D), masks, f)
                d = y - targets[f].to(D)
                losses[f] = 0.5 * (d * d).sum() / y.numel()
                f += 1
            else:
                losses[b].backward()
                grads[b] = {k: (v.grad.clone() if v.grad is not None else torch.zeros_like(v))
                            for k, v in self.p.items()}
                b += 1
        with torch.no_grad():
            after = {k: v - lr * v.grad for k, v in self.p.items()}  # type: ignore[operator]  # all have one
        return [l.item() for l in losses], grads, after
