"""recap's layer kinds (models/layers.h) built from torch's own modules and functions, with recap's
parameter names, shapes, order and math:

  linear     F.linear, W [out, in], b [out]
  layernorm  F.layer_norm, eps 1e-5 (biased variance), weight + bias
  rmsnorm    F.rms_norm (manual x * rsqrt(mean(x^2) + eps) * w where torch lacks it), eps 1e-5
  gelu       F.gelu(approximate="tanh")
  dropout    F.dropout(training=True); p = 0 draws nothing (torch returns its input)
  attention  qkv Linear(h, 3h) -> core -> proj Linear(h, h); the core is recap's AttentionCore:
             q, k, v = column blocks of qkv, head h owns columns h*dh..h*dh+dh-1 of each;
             P = softmax over j <= i of (q_i . k_j) / sqrt(dh) (explicit causal masking with -inf,
             so P is exactly 0 above the diagonal), Pd = F.dropout(P) over [heads, T, T]
             (op "attn_dropout"), out = Pd V. Written out rather than through
             scaled_dot_product_attention: the math backend folds the scale into q and k
             (sqrt(scale) each) and hides its dropout, while this form is recap's arithmetic and its
             dropout is a plain torch dropout whose mask can be observed.
  mlp        fc1 (h -> ffn), gelu, fc2 (ffn -> h), dropout
  swiglu     down(silu(gate(x)) * up(x)), no biases
  block      h = x + drop1(attn(ln1(x))); y = h + mlp(ln2(h))

Paths are recap's: top-level layer i is "<kind><i>"; children are "<parent>.<child>"
("block0.attn.core", "block0.mlp.dropout"). Sub-modules pass through `wrap(module, role)` with
recap's roles ("attn_core", "mlp", "norm"; "block" for a top-level layer), which applies the case's
checkpoint flags with torch.utils.checkpoint.checkpoint.

The run's observer (core.observe.masks.MaskObserver) is attached to a built model with
attach_observer: a dropout opens its site on it and a top-level layer records its position there.
A model with none attached draws unobserved.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, ContextManager, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import case as case_mod

NORM_EPS = 1e-5

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class Observed:
    """A module that reports to the run's observer (attach_observer sets it; None: no run)."""

    observer: Any = None

    def observed_site(self, path: str, op: str) -> ContextManager[None]:
        obs = self.observer
        return obs.site(path, op) if obs is not None else contextlib.nullcontext()

    def enter_layer(self, path: str) -> None:
        """Called by a top-level layer's forward (also when it is recomputed inside backward)."""
        if self.observer is not None:
            self.observer.position.enter_layer(path)


def attach_observer(model: nn.Module, observer: Any) -> None:
    """The run's observer, to every module of `model` that reports to one."""
    for m in model.modules():
        if isinstance(m, Observed):
            m.observer = observer


class RecapModule(Observed, nn.Module):
    """A module with a recap path. `top` is the index of its top-level layer."""

    def __init__(self, path: str, top: int):
        super().__init__()
        self.recap_path = path
        self.recap_top = top

    def recap_params(self) -> List[Tuple[str, nn.Parameter]]:
        return []


class WeightBias(RecapModule):
    """A module whose parameters are `weight` and an optional `bias`, named as recap names them."""

    weight: nn.Parameter
    bias: Optional[nn.Parameter]

    def recap_params(self) -> List[Tuple[str, nn.Parameter]]:
        p = [(self.recap_path + ".weight", self.weight)]
        if self.bias is not None:
            p.append((self.recap_path + ".bias", self.bias))
        return p


class Linear(WeightBias):
    def __init__(self, path: str, top: int, n_in: int, n_out: int, bias: bool, dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__(path, top)
        self.weight = nn.Parameter(torch.zeros(n_out, n_in, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(n_out, dtype=dtype, device=device)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


class Norm(WeightBias):
    def __init__(self, path: str, top: int, width: int, rms: bool, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(path, top)
        self.rms = rms
        self.width = width
        self.weight = nn.Parameter(torch.ones(width, dtype=dtype, device=device))
        self.bias = None if rms else nn.Parameter(torch.zeros(width, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rms:
            return _rms_norm(x, self.weight, NORM_EPS)
        return F.layer_norm(x, (self.width,), self.weight, self.bias, NORM_EPS)


class Gelu(RecapModule):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")


class Dropout(RecapModule):
    def __init__(self, path: str, top: int, p: float, op: str = "dropout"):
        super().__init__(path, top)
        self.p = p
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0:  # recap: no draw; torch's dropout with p = 0 returns its input too
            return x
        with self.observed_site(self.recap_path, self.op):
            return F.dropout(x, self.p, training=True)


class AttentionCore(RecapModule):
    def __init__(self, path: str, top: int, hidden: int, heads: int, p: float):
        super().__init__(path, top)
        self.hidden, self.heads, self.p = hidden, heads, p
        self.dh = hidden // heads
        self.scale = 1.0 / math.sqrt(self.dh)
        # the RNG this dropout draws from: torch's default generator; the megatron driver sets
        # Megatron's tracker fork here, as its DotProductAttention draws attention dropout
        self.rng_context = contextlib.nullcontext

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        T = qkv.shape[0]
        H, nh, dh = self.hidden, self.heads, self.dh
        q = qkv[:, 0:H].reshape(T, nh, dh).transpose(0, 1)  # [heads, T, dh]
        k = qkv[:, H:2 * H].reshape(T, nh, dh).transpose(0, 1)
        v = qkv[:, 2 * H:3 * H].reshape(T, nh, dh).transpose(0, 1)
        s = torch.matmul(q, k.transpose(-1, -2)) * self.scale  # [heads, T, T]
        causal = torch.ones(T, T, dtype=torch.bool, device=qkv.device).triu(1)
        s = s.masked_fill(causal, float("-inf"))
        P = torch.softmax(s, dim=-1)
        if self.p > 0.0:
            with self.rng_context(), self.observed_site(self.recap_path, "attn_dropout"):
                P = F.dropout(P, self.p, training=True)
        out = torch.matmul(P, v)  # [heads, T, dh]
        return out.transpose(0, 1).reshape(T, H)


class Chain(RecapModule):
    """Children in order (Attention, Mlp)."""

    def __init__(self, path: str, top: int, children: List[nn.Module]):
        super().__init__(path, top)
        self.chain = nn.ModuleList(children)

    def recap_params(self) -> List[Tuple[str, nn.Parameter]]:
        out: List[Tuple[str, nn.Parameter]] = []
        for c in self.chain:
            out += recap_params_of(c)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for c in self.chain:
            x = c(x)
        return x


class SwiGlu(RecapModule):
    def __init__(self, path: str, top: int, hidden: int, ffn: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__(path, top)
        self.gate = Linear(_join(path, "gate"), top, hidden, ffn, False, dtype, device)
        self.up = Linear(_join(path, "up"), top, hidden, ffn, False, dtype, device)
        self.down = Linear(_join(path, "down"), top, ffn, hidden, False, dtype, device)

    def recap_params(self) -> List[Tuple[str, nn.Parameter]]:
        return self.gate.recap_params() + self.up.recap_params() + self.down.recap_params()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(RecapModule):
    def __init__(self, path: str, top: int, ln1: nn.Module, attn: nn.Module, drop1: nn.Module, ln2: nn.Module,
                 mlp: nn.Module) -> None:
        super().__init__(path, top)
        self.ln1, self.attn, self.drop1, self.ln2, self.mlp = ln1, attn, drop1, ln2, mlp

    def recap_params(self) -> List[Tuple[str, nn.Parameter]]:
        out: List[Tuple[str, nn.Parameter]] = []
        for c in (self.ln1, self.attn, self.drop1, self.ln2, self.mlp):
            out += recap_params_of(c)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.drop1(self.attn(self.ln1(x)))
        h = x + a
        return h + self.mlp(self.ln2(h))


class Checkpoint(nn.Module):
    """torch.utils.checkpoint.checkpoint around a module (its path and params are the inner's)."""

    def __init__(self, inner: nn.Module, use_reentrant: bool):
        super().__init__()
        self.inner = inner
        self.use_reentrant = use_reentrant
        self.recap_path = getattr(inner, "recap_path", "")
        self.recap_top = getattr(inner, "recap_top", -1)

    def recap_params(self) -> List[Tuple[str, nn.Parameter]]:
        return recap_params_of(self.inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.utils.checkpoint.checkpoint(self.inner, x, use_reentrant=self.use_reentrant,
                                                 preserve_rng_state=True)


class TopLevel(Observed, nn.Module):
    """A top-level layer: records the position (for failure reports) and calls its module."""

    def __init__(self, inner: nn.Module, name: str, index: int):
        super().__init__()
        self.inner = inner
        self.recap_path = name
        self.recap_top = index

    def recap_params(self) -> List[Tuple[str, nn.Parameter]]:
        return recap_params_of(self.inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.enter_layer(self.recap_path)
        return self.inner(x)


def recap_params_of(m: nn.Module) -> List[Tuple[str, nn.Parameter]]:
    f = getattr(m, "recap_params", None)
    return f() if f is not None else []


WrapFn = Callable[[nn.Module, str], nn.Module]


def make_wrap(c: case_mod.Case, layer_index: int,
              checkpoint: Optional[Callable[[nn.Module], nn.Module]] = None) -> WrapFn:
    """The case's checkpoint flags for top-level layer `layer_index` as a WrapFn; `checkpoint`
    wraps a module that is checkpointed (default: torch.utils.checkpoint, the case's style)."""
    l = c.layers[layer_index]
    use_reentrant = c.checkpoint_style == "reentrant"
    ckpt = checkpoint or (lambda m: Checkpoint(m, use_reentrant))

    def wrap(m: nn.Module, role: str) -> nn.Module:
        if l.checkpoint == "full" and role == "block":
            return ckpt(m)
        if l.checkpoint == "selective" and role in l.checkpoint_modules:
            return ckpt(m)
        return m

    return wrap


def build_layer(c: case_mod.Case, i: int, device: torch.device, wrap: Optional[WrapFn] = None) -> TopLevel:
    l = c.layers[i]
    dt = TORCH_DTYPES[c.dtype]
    h = c.hidden
    name = f"{l.kind}{i}"
    w = wrap or (lambda m, role: m)
    k = l.kind
    m: nn.Module
    if k == "linear":
        m = Linear(name, i, h, h, True, dt, device)
    elif k in ("layernorm", "rmsnorm"):
        m = Norm(name, i, h, k == "rmsnorm", dt, device)
    elif k == "gelu":
        m = Gelu(name, i)
    elif k == "swiglu":
        m = SwiGlu(name, i, h, c.ffn(l), dt, device)
    elif k == "dropout":
        m = Dropout(name, i, l.dropout)
    elif k == "attention":
        m = _attention(name, i, h, l.heads, l.dropout, dt, device, w)
    elif k == "mlp":
        m = _mlp(name, i, h, c.ffn(l), l.dropout, dt, device)
    elif k == "block":
        ln1 = w(Norm(_join(name, "ln1"), i, h, False, dt, device), "norm")
        attn = _attention(_join(name, "attn"), i, h, l.heads, l.dropout, dt, device, w)
        drop1 = Dropout(_join(name, "drop1"), i, l.dropout)
        ln2 = w(Norm(_join(name, "ln2"), i, h, False, dt, device), "norm")
        mlp = w(_mlp(_join(name, "mlp"), i, h, c.ffn(l), l.dropout, dt, device), "mlp")
        m = Block(name, i, ln1, attn, drop1, ln2, mlp)
    else:
        raise ValueError(f"unknown layer kind '{k}'")
    return TopLevel(w(m, "block"), name, i)


def _attention(path: str, top: int, h: int, heads: int, p: float, dt: torch.dtype, device: torch.device,
               w: WrapFn) -> Chain:
    qkv = Linear(_join(path, "qkv"), top, h, 3 * h, True, dt, device)
    core = w(AttentionCore(_join(path, "core"), top, h, heads, p), "attn_core")
    proj = Linear(_join(path, "proj"), top, h, h, True, dt, device)
    return Chain(path, top, [qkv, core, proj])


def _mlp(path: str, top: int, h: int, ffn: int, p: float, dt: torch.dtype, device: torch.device) -> Chain:
    fc1 = Linear(_join(path, "fc1"), top, h, ffn, True, dt, device)
    gelu = Gelu(_join(path, "gelu"), top)
    fc2 = Linear(_join(path, "fc2"), top, ffn, h, True, dt, device)
    drop = Dropout(_join(path, "dropout"), top, p)
    return Chain(path, top, [fc1, gelu, fc2, drop])


class RecapParamList(nn.Module):
    """A stack's parameters in recap's order, as (recap name, parameter) pairs in `named`."""

    named: List[Tuple[str, nn.Parameter]]

    def check_names(self, c: case_mod.Case) -> None:
        expected = [p.name for p in case_mod.param_infos(c)]
        got = [n for n, _ in self.named]
        if got != expected:  # the two descriptions of recap's parameters must agree
            raise AssertionError(f"parameter names {got} differ from recap's {expected}")

    @property
    def param_names(self) -> List[str]:
        return [n for n, _ in self.named]

    @property
    def params(self) -> List[nn.Parameter]:
        return [p for _, p in self.named]


class Model(RecapParamList):
    """The stack, with recap's parameter list (names, order)."""

    def __init__(self, c: case_mod.Case, device: torch.device, checkpoints: bool = True) -> None:
        super().__init__()
        self.case = c
        self.layers = nn.ModuleList(
            [build_layer(c, i, device, make_wrap(c, i) if checkpoints else None) for i in range(len(c.layers))])
        self.named = []
        for l in self.layers:
            self.named += recap_params_of(l)
        self.check_names(c)

    def layer_params(self, i: int) -> List[nn.Parameter]:
        return [p for _, p in recap_params_of(self.layers[i])]

    def load(self, values: Dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for n, p in self.named:
                p.copy_(values[n].to(p.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for l in self.layers:
            x = l(x)
        return x


def mse_loss(y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """recap's loss, 0.5 * sum((y - t)^2) / numel, accumulated in double (models/op_math.h); the
    gradient reaching y is (y - t) / numel rounded to y's dtype."""
    d = y.double() - target.double()
    return 0.5 * (d * d).sum() / y.numel()
