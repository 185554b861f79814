"""Tensor parallelism for the torch driver's rank groups (PROTOCOL.md, "Rank groups"): recap's
layers split across the ranks of one torch.distributed group the way megatron-core splits them,
written here with torch alone so that the torch driver runs multi-rank cases on the CPU (gloo).

  linear     column-parallel (weight and bias rows split), output all-gathered
  mlp        fc1 column-parallel, gelu on the rank's columns, fc2 row-parallel + all-reduce, + fc2's
             (replicated) bias, dropout on the full hidden outside the region
  swiglu     gate and up column-parallel, down row-parallel + all-reduce
  attention  qkv column-parallel by heads (rank r owns heads r*nh/N ..; its rows of q, k and v),
             the core on the rank's heads, its attention dropout INSIDE the region, drawn from the
             rank's own tensor-parallel generator; proj row-parallel + all-reduce, + bias
  block      ln1, ln2 and drop1 replicated (drop1 outside the region), attention and mlp as above
  layernorm, rmsnorm, gelu, dropout: replicated; a dropout layer draws outside any region

The communication mirrors megatron-core's tensor_parallel/mappings.py: _CopyToModelParallelRegion
(identity forward, all-reduce backward) in front of a column-parallel layer, _ReduceFromModelParallel
Region (all-reduce forward, identity backward) after a row-parallel one, _GatherFromModelParallel
Region (all-gather forward, own slice backward) for a column-parallel layer whose output is gathered.

Generators mirror megatron-core's tensor_parallel/random.py: model_parallel_cuda_manual_seed(seed)
seeds the default generator with `seed` on every rank (the data-parallel state: dropouts outside
tensor-parallel regions draw equal masks on every rank) and adds the tracker state
'model-parallel-rng' seeded `seed + 2718 + tp_rank` (dropouts inside regions differ across ranks);
CudaRNGStatesTracker.fork swaps that state into the default generator around a draw and stores its
advance. Here the default generator is the device's (the CPU's on gloo), so one code path serves
both. A checkpoint saves the tracker's states at its forward and recomputes with them, as
random.py's CheckpointFunction does (forward: `ctx.rng_states = _get_all_rng_states()`; backward:
`_set_all_rng_states(*ctx.rng_states)` inside `_fork_rng()`); torch.utils.checkpoint itself
restores only the default generator, so without this every recompute inside a region would draw
from an advanced tracker state.

Sequence parallelism (a case's "sp", megatron-core's `sequence_parallel`): between the
tensor-parallel regions each rank holds its own slice of the sequence (tokens r*T/N .. (r+1)*T/N),
not the whole activation. The first layer takes the rank's rows of the input and the last gathers
the rows again (_ScatterToSequenceParallelRegion, _GatherFromSequenceParallelRegion); a
column-parallel layer all-gathers the rows where it would copy its input into the region (backward:
reduce-scatter), a row-parallel one reduce-scatters the rows where it would all-reduce (backward:
all-gather). Norms, dropouts and residual adds run on the rank's rows. So:
  - every top-level layer runs inside the tracker's fork, as megatron-core's TransformerBlock runs
    its layers under `get_cuda_rng_tracker().fork()` when sequence_parallel is set: a dropout on the
    rank's rows draws from the rank's own generator (equal masks on different rows would correlate
    the dropout of the whole sequence); DotProductAttention then does not fork again. Every draw
    site is per-rank (`rank_tp_sites`), its full mask the ranks' masks in rank order.
  - a parameter every rank holds whole (norms, a row-parallel bias) sees only the rank's rows, so
    its gradient is summed over the group (megatron-core finalize_model_grads, for parameters
    marked `sequence_parallel`). Here a hook sums each contribution as backward computes it, so the
    gradient after every microbatch is the whole one (recap compares per-microbatch gradients);
    megatron-core sums the accumulated gradient once, after the last microbatch.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ... import case as case_mod
from ...core import layers as L
from ...core import rank_faults
from ...core.layout import PP_SEED_STRIDE, Layout, dp_problem, local_case, local_data, pp_problem, request_dims
from ...core.records import RunData
from .data_parallel import grad_reducer
from .pipeline import PPRunner, plant_kill_rank, pp_extras
from .runner import TorchRunner
from .sut import TorchSUT

# megatron-core tensor_parallel/random.py: "2718 is just for fun and any POSITIVE value will work"
TP_SEED_OFFSET = 2718
TP_RNG = "model-parallel-rng"

Ranges = List[Tuple[int, int]]


class RngTracker:
    """megatron-core's CudaRNGStatesTracker (tensor_parallel/random.py) on the device's default
    generator: named states, fork() swaps one in around the draws of a region."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        if device.type == "cuda":
            idx = device.index if device.index is not None else torch.cuda.current_device()
            self.gen = torch.cuda.default_generators[idx]
        else:
            self.gen = torch.default_generator
        self.states: Dict[str, torch.Tensor] = {}

    def add(self, name: str, seed: int) -> None:
        g = torch.Generator(device=self.device)
        g.manual_seed(seed)
        self.states[name] = g.get_state()

    def get_states(self) -> Dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.states.items()}

    def set_states(self, states: Dict[str, torch.Tensor]) -> None:
        self.states = {k: v.clone() for k, v in states.items()}

    @contextlib.contextmanager
    def fork(self, name: str = TP_RNG) -> Iterator[None]:
        orig = self.gen.get_state()
        self.gen.set_state(self.states[name])
        try:
            yield
        finally:
            self.states[name] = self.gen.get_state()
            self.gen.set_state(orig)


class Ctx:
    """One rank's view of the tensor-parallel group; sp: sequence parallel."""

    def __init__(self, rank: int, world: int, device: torch.device, tracker: RngTracker, sp: bool = False) -> None:
        self.rank, self.world, self.device, self.tracker, self.sp = rank, world, device, tracker, sp

    def even(self, n: int, offset: int = 0) -> Ranges:
        k = n // self.world
        return [(offset + self.rank * k, offset + (self.rank + 1) * k)]

    def even_of(self, n: int, rank: int, offset: int = 0) -> Ranges:
        k = n // self.world
        return [(offset + rank * k, offset + (rank + 1) * k)]


# -- the tensor-parallel group of the run in progress (megatron-core parallel_state's) --

class TPGroup:
    """The tensor-parallel group of this rank's run: its process group (None: the whole world), the
    rank's place in it and its size. Module state, as megatron-core's parallel_state keeps it: a
    rank runs one request at a time, and the runner sets it before it builds its model."""

    pg: Optional[Any] = None
    rank = 0
    world = 1

    @classmethod
    def set(cls, pg: Optional[Any], rank: int, world: int) -> None:
        cls.pg, cls.rank, cls.world = pg, rank, world


def _all_reduce(x: torch.Tensor) -> None:
    dist.all_reduce(x, group=TPGroup.pg)


# -- the regions' communication (megatron-core tensor_parallel/mappings.py) --

class _CopyToRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        if rank_faults.FAULT == "tp-grad-not-reduced":  # planted: the input gradient stays partial
            return g
        g = g.contiguous().clone()
        _all_reduce(g)
        return g


class _ReduceFromRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x.contiguous().clone()
        _all_reduce(y)
        return y

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g


class _GatherFromRegion(torch.autograd.Function):
    """All-gather along the last dimension; the backward keeps the rank's own slice."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        world, rank = TPGroup.world, TPGroup.rank
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous(), group=TPGroup.pg)
        ctx.rank, ctx.width = rank, x.shape[-1]
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g.narrow(-1, ctx.rank * ctx.width, ctx.width).contiguous()


# -- sequence parallelism: the rows (dimension 0, the sequence) split over the group --

def _rows_of_rank(x: torch.Tensor) -> torch.Tensor:
    world, rank = TPGroup.world, TPGroup.rank
    n = x.shape[0] // world
    return x.narrow(0, rank * n, n).contiguous()


def _all_gather_rows(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty((x.shape[0] * TPGroup.world,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, x, group=TPGroup.pg)
    return out


def _reduce_scatter_rows(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty((x.shape[0] // TPGroup.world,) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, x, group=TPGroup.pg)
    return out


class _ScatterToSeq(torch.autograd.Function):
    """The rank's rows of a whole activation; backward all-gathers (megatron-core
    _ScatterToSequenceParallelRegion)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return _rows_of_rank(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return _all_gather_rows(g)


class _GatherFromSeq(torch.autograd.Function):
    """All-gather of the rows; backward reduce-scatters where the consumer is tensor-parallel (its
    input gradients are partial sums), else keeps the rank's rows (megatron-core
    _GatherFromSequenceParallelRegion, tensor_parallel_output_grad)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, partial_grad: bool) -> torch.Tensor:
        ctx.partial_grad = partial_grad
        return _all_gather_rows(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Tuple[torch.Tensor, None]:
        if ctx.partial_grad and rank_faults.FAULT != "tp-grad-not-reduced":
            return _reduce_scatter_rows(g), None
        return _rows_of_rank(g), None


class _ReduceScatterToSeq(torch.autograd.Function):
    """Partial sums reduce-scattered over the rows; backward all-gathers (megatron-core
    _ReduceScatterToSequenceParallelRegion)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return _reduce_scatter_rows(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return _all_gather_rows(g)


def _sum_over_group(g: torch.Tensor) -> torch.Tensor:
    g = g.contiguous().clone()
    _all_reduce(g)
    return g


def _gather_ranges(full: torch.Tensor, dim: int, ranges: Ranges) -> torch.Tensor:
    return torch.cat([full.narrow(dim, a, b - a) for a, b in ranges], dim=dim)


class Sharded:
    """A module whose parameters are shards: `shard_spec[name] = (dim, ranges of every rank)`."""

    shard_spec: Dict[str, Tuple[int, List[Ranges]]]


class ColumnLinear(L.WeightBias, Sharded):
    """Weight rows (and bias) split; input copied into the region; output local or all-gathered."""

    def __init__(self, path: str, top: int, n_in: int, ranges_of: Callable[[int], Ranges], world: int, rank: int,
                 bias: bool, gather: bool, dt: torch.dtype, dev: torch.device, sp: bool = False) -> None:
        super().__init__(path, top)
        self.sp = sp
        mine = ranges_of(rank)
        rows = sum(b - a for a, b in mine)
        self.weight = nn.Parameter(torch.zeros(rows, n_in, dtype=dt, device=dev))
        self.bias = nn.Parameter(torch.zeros(rows, dtype=dt, device=dev)) if bias else None
        self.gather = gather
        every = [ranges_of(r) for r in range(world)]
        self.shard_spec = {path + ".weight": (0, every)}
        if bias:
            self.shard_spec[path + ".bias"] = (0, every)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _GatherFromSeq.apply(x, True) if self.sp else _CopyToRegion.apply(x)
        y = F.linear(x, self.weight, self.bias)
        if not self.gather:
            return y
        y = _GatherFromRegion.apply(y)
        return _ScatterToSeq.apply(y) if self.sp else y  # the whole output, then the rank's rows again


class RowLinear(L.WeightBias, Sharded):
    """Weight columns split; the rank's input columns in, partial sums all-reduced, + the
    replicated bias (megatron-core's RowParallelLinear adds it after the reduction)."""

    def __init__(self, path: str, top: int, n_out: int, ranges_of: Callable[[int], Ranges], world: int, rank: int,
                 bias: bool, dt: torch.dtype, dev: torch.device, sp: bool = False) -> None:
        super().__init__(path, top)
        self.sp = sp
        cols = sum(b - a for a, b in ranges_of(rank))
        self.weight = nn.Parameter(torch.zeros(n_out, cols, dtype=dt, device=dev))
        self.bias = nn.Parameter(torch.zeros(n_out, dtype=dt, device=dev)) if bias else None
        self.shard_spec = {path + ".weight": (1, [ranges_of(r) for r in range(world)])}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        part = F.linear(x, self.weight)
        y = _ReduceScatterToSeq.apply(part) if self.sp else _ReduceFromRegion.apply(part)
        return y + self.bias if self.bias is not None else y


class TPSwiGlu(L.RecapModule):
    def __init__(self, path: str, top: int, h: int, ffn: int, ctx: Ctx, dt: torch.dtype, dev: torch.device) -> None:
        super().__init__(path, top)
        W, r = ctx.world, ctx.rank
        sp = ctx.sp
        self.gate = ColumnLinear(path + ".gate", top, h, lambda k: ctx.even_of(ffn, k), W, r, False, False, dt, dev, sp)
        self.up = ColumnLinear(path + ".up", top, h, lambda k: ctx.even_of(ffn, k), W, r, False, False, dt, dev, sp)
        self.down = RowLinear(path + ".down", top, h, lambda k: ctx.even_of(ffn, k), W, r, False, dt, dev, sp)

    def recap_params(self) -> List[Tuple[str, nn.Parameter]]:
        return self.gate.recap_params() + self.up.recap_params() + self.down.recap_params()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def _attention(path: str, top: int, h: int, heads: int, p: float, ctx: Ctx, dt: torch.dtype, dev: torch.device,
               w: L.WrapFn, tp_sites: List[str]) -> L.Chain:
    W, r = ctx.world, ctx.rank
    hl = h // W

    def qkv_rows(k: int) -> Ranges:  # the rank's heads' rows of q, k and v (recap's [q | k | v] layout)
        return [(j * h + k * hl, j * h + (k + 1) * hl) for j in range(3)]

    qkv = ColumnLinear(path + ".qkv", top, h, qkv_rows, W, r, True, False, dt, dev, ctx.sp)
    core = L.AttentionCore(path + ".core", top, hl, heads // W, p)
    if not ctx.sp:  # inside the region: the rank's own generator (with sp the whole layer runs in the fork)
        core.rng_context = lambda: ctx.tracker.fork(TP_RNG)  # type: ignore[assignment]
    if p > 0.0:
        tp_sites.append(path + ".core")
    proj = RowLinear(path + ".proj", top, h, lambda k: ctx.even_of(h, k), W, r, True, dt, dev, ctx.sp)
    return L.Chain(path, top, [qkv, w(core, "attn_core"), proj])


def _mlp(path: str, top: int, h: int, ffn: int, p: float, ctx: Ctx, dt: torch.dtype, dev: torch.device) -> L.Chain:
    W, r = ctx.world, ctx.rank
    fc1 = ColumnLinear(path + ".fc1", top, h, lambda k: ctx.even_of(ffn, k), W, r, True, False, dt, dev, ctx.sp)
    fc2 = RowLinear(path + ".fc2", top, h, lambda k: ctx.even_of(ffn, k), W, r, True, dt, dev, ctx.sp)
    return L.Chain(path, top, [fc1, L.Gelu(path + ".gelu", top), fc2, L.Dropout(path + ".dropout", top, p)])


def build_tp_layer(c: case_mod.Case, i: int, ctx: Ctx, w: L.WrapFn, tp_sites: List[str]) -> L.TopLevel:
    l = c.layers[i]
    dt, dev, h = L.TORCH_DTYPES[c.dtype], ctx.device, c.hidden
    name = f"{l.kind}{i}"
    k = l.kind
    m: nn.Module
    if k == "linear":
        m = ColumnLinear(name, i, h, lambda r: ctx.even_of(h, r), ctx.world, ctx.rank, True, True, dt, dev, ctx.sp)
    elif k == "swiglu":
        m = TPSwiGlu(name, i, h, c.ffn(l), ctx, dt, dev)
    elif k == "attention":
        m = _attention(name, i, h, l.heads, l.dropout, ctx, dt, dev, w, tp_sites)
    elif k == "mlp":
        m = _mlp(name, i, h, c.ffn(l), l.dropout, ctx, dt, dev)
    elif k == "block":
        ln1 = w(L.Norm(name + ".ln1", i, h, False, dt, dev), "norm")
        attn = _attention(name + ".attn", i, h, l.heads, l.dropout, ctx, dt, dev, w, tp_sites)
        drop1 = L.Dropout(name + ".drop1", i, l.dropout)
        ln2 = w(L.Norm(name + ".ln2", i, h, False, dt, dev), "norm")
        mlp = w(_mlp(name + ".mlp", i, h, c.ffn(l), l.dropout, ctx, dt, dev), "mlp")
        m = L.Block(name, i, ln1, attn, drop1, ln2, mlp)
    else:  # layernorm, rmsnorm, gelu, dropout: replicated, as one rank builds them
        return L.build_layer(c, i, dev, w)
    return L.TopLevel(w(m, "block"), name, i)


class TPCheckpoint(L.Checkpoint):
    """torch.utils.checkpoint around a module, recomputing with the tracker's states of its forward
    (megatron-core random.py CheckpointFunction); the default generator is torch's to restore."""

    def __init__(self, inner: nn.Module, use_reentrant: bool, tracker: RngTracker) -> None:
        super().__init__(inner, use_reentrant)
        self.tracker = tracker

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        saved = self.tracker.get_states()
        calls = [0]
        stale = rank_faults.FAULT == "tp-recompute-stale"

        def run(y: torch.Tensor) -> torch.Tensor:
            calls[0] += 1
            if calls[0] == 1 or stale:  # the forward (or, planted, a recompute from the current state)
                return self.inner(y)
            now = self.tracker.get_states()  # the backward's states, restored after (random.py _fork_rng)
            self.tracker.set_states(saved)
            try:
                return self.inner(y)
            finally:
                self.tracker.set_states(now)

        return torch.utils.checkpoint.checkpoint(run, x, use_reentrant=self.use_reentrant, preserve_rng_state=True)


class SPLayer(nn.Module):
    """A top-level layer under sequence parallelism: it runs inside the tracker's fork (megatron-core
    TransformerBlock.forward with sequence_parallel); the first layer takes the rank's rows of the
    input, the last gathers the rows of its output (the loss is computed whole on every rank)."""

    def __init__(self, inner: nn.Module, tracker: RngTracker, first: bool, last: bool) -> None:
        super().__init__()
        self.inner, self.tracker, self.first, self.last = inner, tracker, first, last

    def recap_params(self) -> List[Tuple[str, nn.Parameter]]:
        return L.recap_params_of(self.inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            x = _ScatterToSeq.apply(x)
        # planted: megatron-core 0.9.0's TransformerBlock entered `rng_context and fp8_context`, the
        # second context alone, so no fork: every rank's rows drew the shared generator's masks
        fork = contextlib.nullcontext() if rank_faults.FAULT == "sp-block-no-fork" else self.tracker.fork(TP_RNG)
        with fork:
            y = self.inner(x)
        return _GatherFromSeq.apply(y, False) if self.last else y


class TPModel(L.RecapParamList):
    """recap's stack split over the tensor-parallel group; `named` holds this rank's shards under
    recap's names, `shards` how each parameter is split (None: replicated)."""

    def __init__(self, c: case_mod.Case, ctx: Ctx) -> None:
        super().__init__()
        self.case = c
        use_reentrant = c.checkpoint_style == "reentrant"
        self.tp_sites: List[str] = []
        built = [build_tp_layer(c, i, ctx, L.make_wrap(c, i, lambda m: TPCheckpoint(m, use_reentrant, ctx.tracker)),
                                self.tp_sites) for i in range(len(c.layers))]
        self.sp = ctx.sp
        if ctx.sp:
            n = len(built)
            built = [SPLayer(m, ctx.tracker, i == 0, i == n - 1) for i, m in enumerate(built)]  # type: ignore[misc]
            # every draw is on the rank's rows or heads, from its own generator
            self.tp_sites = [m.recap_path for m in nn.ModuleList(built).modules()
                             if isinstance(m, (L.Dropout, L.AttentionCore)) and m.p > 0.0]
        self.layers = nn.ModuleList(built)
        self.named = []
        for l in self.layers:
            self.named += L.recap_params_of(l)
        self.check_names(c)
        spec: Dict[str, Tuple[int, List[Ranges]]] = {}
        for m in self.modules():
            if isinstance(m, Sharded):
                spec.update(m.shard_spec)
        self.spec = spec
        if ctx.sp and rank_faults.FAULT != "sp-grad-not-reduced":  # planted: each rank keeps its rows' part
            for name, p in self.named:
                if name not in spec:  # held whole, fed the rank's rows: its gradient is summed over the group
                    p.register_hook(_sum_over_group)

    def layer_params(self, i: int) -> List[nn.Parameter]:
        return [p for _, p in L.recap_params_of(self.layers[i])]

    def load(self, values: Dict[str, torch.Tensor]) -> None:
        """This rank's shard of every parameter, cut from the full values recap sent."""
        me = TPGroup.rank
        with torch.no_grad():
            for n, p in self.named:
                v = values[n]
                if n in self.spec:
                    dim, every = self.spec[n]
                    v = _gather_ranges(v, dim, every[me])
                p.copy_(v.to(p.dtype))

    def shard_table(self) -> List[Dict[str, Any]]:
        """Per parameter (recap's index): the split dimension and every rank's ranges, or dim None."""
        out: List[Dict[str, Any]] = []
        for i, (n, _) in enumerate(self.named):
            if n in self.spec:
                dim, every = self.spec[n]
                out.append({"param": i, "dim": dim, "ranges": [[[a, b] for a, b in rr] for rr in every]})
            else:
                out.append({"param": i, "dim": None, "ranges": []})
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for l in self.layers:
            x = l(x)
        return x


def tp_problem(c: case_mod.Case, world: int) -> str:
    """"" when every layer splits evenly over `world` ranks, else one line naming the layer."""
    for i, l in enumerate(c.layers):
        name = f"{l.kind}{i}"
        if l.kind in ("attention", "block") and l.heads % world:
            return f"tp {world}: {name} has {l.heads} heads, not a multiple of {world}"
        if l.kind in ("mlp", "swiglu", "block") and c.ffn(l) % world:
            return f"tp {world}: {name}'s ffn width {c.ffn(l)} is not a multiple of {world}"
        if l.kind == "linear" and c.hidden % world:
            return f"tp {world}: {name}'s hidden {c.hidden} is not a multiple of {world}"
    if c.sp and c.tokens % world:
        return f"sp with tp {world}: tokens {c.tokens} is not a multiple of {world} (each rank holds tokens / tp rows)"
    return ""


def megatron_seeds(device: torch.device, seed: int, tp_rank: int) -> RngTracker:
    """megatron-core's model_parallel_cuda_manual_seed(seed) on this rank: the default generator
    seeded `seed` (equal on every tensor-parallel rank), and the tracker with 'model-parallel-rng'
    seeded seed + 2718 + tp_rank. Planted: dp-seed-per-rank seeds the default generator
    seed + tp_rank; tp-seed-shared seeds rank 1's tracker as rank 0's."""
    torch.manual_seed(seed + (tp_rank if rank_faults.FAULT == "dp-seed-per-rank" else 0))
    tracker = RngTracker(device)
    shared = rank_faults.FAULT == "tp-seed-shared" and tp_rank == 1
    tracker.add(TP_RNG, seed + TP_SEED_OFFSET + (0 if shared else tp_rank))
    return tracker


class TPRunner(TorchRunner):
    """One rank's execution of a case: the tensor-parallel model, the generators seeded as
    megatron-core's model_parallel_cuda_manual_seed seeds them. With dp replicas, the model is split
    over the replica's tensor-parallel group (every replica seeded alike, as megatron seeds them)."""

    def __init__(self, sut: Any, c: Any, data: Any, tp: int, dp: int = 1) -> None:
        self.layout = Layout(tp, dp, 1, dist.get_rank())
        super().__init__(sut, c, data)

    def make_model(self) -> Any:
        lay, c = self.layout, self.case
        TPGroup.set(self.sut.tp_group(lay, lay.stage, lay.replica) if lay.dp > 1 else None, lay.tp_rank, lay.tp)
        self.tracker = tracker = megatron_seeds(self.dev, c.seed_rng, lay.tp_rank)
        model = TPModel(c, Ctx(lay.tp_rank, lay.tp, self.dev, tracker, c.sp))
        if rank_faults.FAULT == "kill-rank" and lay.rank == dist.get_world_size() - 1:
            plant_kill_rank(model.layers[0], lay.rank)
        return model


class TPPipelineRunner(PPRunner):
    """One rank of tp T inside pp P stages (T * P ranks): its stage's layers split over the stage's
    tensor-parallel group, seeded as megatron's training seeds them: the default generator
    `seed + 100 * stage` (initialize.py _set_random_seed), the tracker that seed + 2718 + the
    tensor-parallel rank (model_parallel_cuda_manual_seed)."""

    def make_model(self) -> Any:
        c, tp, stage, tp_rank = self.case, self.tp, self.stage, self.tp_rank
        TPGroup.set(self.sut.tp_group(self.layout, stage, self.replica), tp_rank, tp)
        seed = c.seed_rng + PP_SEED_STRIDE * (0 if rank_faults.FAULT == "pp-stage-seed-shared" else stage)
        self.tracker = tracker = megatron_seeds(self.dev, seed, tp_rank)
        model = TPModel(c, Ctx(tp_rank, tp, self.dev, tracker, c.sp))
        rank = dist.get_rank()
        if rank_faults.FAULT == "kill-rank" and rank == dist.get_world_size() - 1:
            plant_kill_rank(model.layers[self.span[0]], rank)
        return model

    def act_shape(self) -> Tuple[int, ...]:
        c = self.case
        return (c.tokens // self.tp if c.sp else c.tokens, c.hidden)


def rank_extras(model: Optional[TPModel]) -> Dict[str, Any]:
    """What a rank's observation adds for the leader (core/ranks.py merges it into `ranks`)."""
    if model is None:
        return {}
    return {"rank_shards": model.shard_table(), "rank_tp_sites": list(model.tp_sites), "rank_sp": model.sp}


# virtual pipeline stages a group runs (pp > 1): 2 and 3 give the interleaved warmup's (V - 1) * P
# term two values; more only lengthen the cases
VP_VALUES = [2, 3]


def group_sizes(world: int) -> List[int]:
    """The tp (and pp) values above 1 a group of `world` ranks runs: the divisors of world (tp * pp
    == world)."""
    return [d for d in range(2, world + 1) if world % d == 0]


class TorchRankSUT(TorchSUT):
    """One rank's torch SUT in a rank group: eager cases, split tensor-parallel over the group (tp N),
    into pipeline stages, one per rank (pp N; frameworks/torch/pipeline.py), or both (tp T, pp P),
    on dp replicas (frameworks/torch/data_parallel.py) of T * P ranks each."""

    def __init__(self, device: str, rank: int, world: int) -> None:
        super().__init__(device)
        self.rank, self.world = rank, world
        self.extras: Dict[str, Any] = {}
        self.pp, self.dp = 1, 1  # the run request's (the leader checked it: tp * pp * dp == world)
        self._groups: Dict[Tuple[int, int, int], Tuple[Dict[Tuple[int, int], Any], Dict[Tuple[int, int], Any]]] = {}

    def _layout_groups(self, lay: Layout) -> Tuple[Dict[Tuple[int, int], Any], Dict[Tuple[int, int], Any]]:
        """Every process group of a tp x dp x pp layout: the tensor-parallel group of each (stage,
        replica) and the data-parallel group of each (stage, tensor-parallel rank). Every rank makes
        every group, in the same order (new_group is collective), once per layout."""
        key = (lay.tp, lay.dp, lay.pp)
        if key not in self._groups:
            tp_groups = {(s, d): dist.new_group(lay.tp_ranks(s, d)) for s in range(lay.pp) for d in range(lay.dp)}
            dp_groups = {(s, t): dist.new_group(lay.dp_ranks(s, t)) for s in range(lay.pp) for t in range(lay.tp)}
            self._groups[key] = (tp_groups, dp_groups)
        return self._groups[key]

    def tp_group(self, lay: Layout, stage: int, replica: int) -> Any:
        """The tensor-parallel process group of `stage`'s replica `replica`."""
        return self._layout_groups(lay)[0][(stage, replica)]

    def dp_group(self, lay: Layout, stage: int, tp_rank: int) -> Any:
        """The data-parallel process group of `stage`'s tensor-parallel rank `tp_rank`."""
        return self._layout_groups(lay)[1][(stage, tp_rank)]

    def capabilities(self) -> Dict[str, Any]:
        caps = super().capabilities()
        # per-layer graphs where the layers hold no collective (tp 1: stages, replicas; why_skipped)
        caps["executor"] = ["eager"] + (["per-layer"] if self.graphs else [])
        caps["tp"] = group_sizes(self.world)
        caps["pp"] = group_sizes(self.world)
        caps["vp"] = VP_VALUES if self.world > 1 else []
        caps["dp"] = group_sizes(self.world)
        caps["sp"] = True
        return caps

    def why_skipped(self, c: case_mod.Case) -> str:
        tp = self.world // (self.pp * self.dp)
        if c.executor == "full-iteration":
            return ("executor full-iteration: a rank group captures per-layer graphs only (one graph of a whole "
                    "step would hold the group's sends, receives and collectives)")
        if c.executor == "per-layer" and any(l.graphed for l in c.layers):
            if tp > 1:
                return (f"executor per-layer with tp {tp}: graphs of layers that hold tensor-parallel collectives "
                        "are not built by this driver (a gloo collective cannot be captured)")
            if self.pp > 1 and c.shared_pool and c.microbatches > 1:
                return (f"shared_pool with pp {self.pp}: torch.cuda.make_graphed_callables captures a call's forwards "
                        "then its backwards, and has no _order (TransformerEngine's) for a stage's 1F1B order")
        # a replica's stages run its share of the microbatches (dp first: megatron's interleaved
        # schedule refuses a share that is not a multiple of pp)
        return (super().why_skipped(c) or (dp_problem(c, self.dp) if self.dp > 1 else "")
                or (pp_problem(local_case(c, self.dp) if self.dp > 1 else c, self.pp) if self.pp > 1 else "")
                or (tp_problem(c, tp) if tp > 1 else ""))

    def make_runner(self, c: case_mod.Case, data: RunData) -> TorchRunner:
        pp, dp = self.pp, self.dp
        tp = self.world // (pp * dp)
        lay = Layout(tp, dp, pp, self.rank)
        if dp > 1:  # the replica's share of the step: its microbatches, numbered from 0
            data = local_data(data, c, dp, lay.replica)
            c = local_case(c, dp)
        r: TorchRunner
        if pp > 1:
            r = TPPipelineRunner(self, c, data, pp, tp, dp) if tp > 1 else PPRunner(self, c, data, pp, 1, dp)
            self.extras = pp_extras(r)  # its schedule fills as the steps run
            if tp > 1:
                self.extras.update(rank_extras(r.model))
        elif tp > 1:
            r = TPRunner(self, c, data, tp, dp)
            self.extras = rank_extras(r.model)
        else:  # dp replicas of one rank each: the whole model, as one rank builds it
            r = TorchRunner(self, c, data)
        if dp > 1:
            mine = r.stage_params() if isinstance(r, PPRunner) else list(range(len(r.params)))
            r.reduce_grads = grad_reducer(r.params, mine, self.dp_group(lay, lay.stage, lay.tp_rank))
            self.extras["rank_dp"] = {"dp": dp, "replica": lay.replica, "microbatches": c.microbatches}
        return r

    def serve_run(self, request: Dict[str, Any], frames: List[Any]) -> Tuple[Dict[str, Any], List[Any]]:
        self.extras = {}
        self.pp, self.dp = request_dims(request)
        h, out = super().serve_run(request, frames)
        h.update(self.extras)  # the leader (core/ranks.merge) moves them into the reply's `ranks`
        return h, out
