"""megatron-core's rank groups (PROTOCOL.md, "Rank groups"): `python3 -m recap_drivers --sut
megatron --ranks N` is one worker of N ranks, started and gathered as the torch driver's groups are
(core/ranks.py: rank 0 speaks the protocol, the others answer it over pipes). Here megatron-core
itself splits the model and talks between the ranks; the driver only says how the group is laid out.

Layout. Each run request names tp, pp and dp (tp * pp * dp == N). Before a case whose layout
differs from the last one, every rank calls parallel_state.destroy_model_parallel() and
initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
(collective: every rank does it for the same request), so megatron's groups are megatron's own, in
its "tp-cp-ep-dp-pp" order
(core/layout.py Layout is the same order). The process group is the leader's:
nccl with a GPU per rank, else gloo over CUDA tensors (core/ranks.py backend_for): on one GPU
megatron's tensor-parallel all-reduces run over gloo, which cannot run inside a CUDA graph, so
there a group runs eager cases only.

What a rank runs is what a megatron-core user's rank runs: TransformerConfig with
tensor_model_parallel_size and sequence_parallel, TransformerLayer (local spec) splitting its own
linear layers, model_parallel_cuda_manual_seed reading the rank from parallel_state (the tracker's
'model-parallel-rng' differs per tensor-parallel rank; the default generator is equal), Megatron's
DistributedDataParallel over parallel_state's data-parallel group, forward_backward_no_pipelining,
and megatron's own finalize_model_grads after the backwards: the data-parallel all-reduce (a sum,
with calculate_per_token_loss, as recap's loss sums its microbatches) and, with sequence
parallelism, the layernorm and row-parallel bias gradients summed over the tensor-parallel group.
It is called without num_tokens: recap's loss is never divided by a token count, on one rank or
many (the one-rank driver does not call it at all: on one rank it does nothing else).

Observation, beside megatron's run and without changing it:
  - each rank loads its part of recap's parameters and reports its part of every gradient in
    recap's order (shards.py), with the group's shard table (`rank_shards`);
  - draws inside tensor-parallel regions (`rank_tp_sites`): a block's attention dropout (in
    DotProductAttention under the tracker's fork), and with sequence parallelism every draw (the
    layers run inside the fork, as TransformerBlock runs them);
  - with sequence parallelism a microbatch's gradient of a parameter megatron marks
    `sequence_parallel` is the rank's rows' part until finalize_model_grads sums it: the copy
    recap reports per microbatch is summed over the tensor-parallel group (a collective on recap's
    copy, not on megatron's gradient), so every reported gradient is the whole one;
  - a data-parallel replica runs its microbatches (core/layout.py local_case, local_data:
    megatron's data iterators give each replica its shard) and reports, per
    microbatch, its own accumulation (copied before finalize_model_grads) and, for the step, the
    gradients megatron's finalize left in main_grad (`rank_dp`).

Ranks sharing a GPU over gloo (fewer GPUs than ranks) run tp cases only: megatron's grad sync
(finalize_model_grads -> DistributedDataParallel.finish_grad_sync) all-reduces its buckets inside
torch's _coalescing_manager, whose allreduce_coalesced gloo refuses for CUDA tensors, so a case of
dp > 1 or sp is skipped naming this, and finalize_model_grads is not called: with dp 1, pp 1 and no
sp it has nothing to do (an all-reduce over one replica; no sequence-parallel gradient; no
embedding), as on one rank. With a GPU per rank (nccl) it is always called.

Pipeline stages (pp > 1): megatron's get_forward_backward_func() is its 1F1B schedule, its
p2p_communication carries the activations. It sends CUDA tensors, which gloo cannot (it hands the
device pointer to its TCP transport), so stages need a GPU per rank (nccl); elsewhere such a case is
skipped naming this. Stage s runs layers s*L/pp .. (megatron's even split); every rank builds them
all, so that its observation has recap's whole parameter list; each stage is seeded seed + 100 *
stage (Megatron-LM's _set_random_seed). The stage's output is marked (_BackwardStarts): its backward
is the first of the stage's backward of a microbatch, where the stage records the event, sets the
microbatch a recompute draws for and copies the previous microbatch's gradients.

Virtual stages (vp > 1 with pp > 1): the rank runs vp model chunks (model.py MegatronChunk, chunk c
holding virtual stage c * pp + stage's layers), each its own DDP, in megatron's interleaved schedule;
each chunk's output is marked, and a chunk's gradients are copied when its next backward starts.
The p2p is set as Megatron-LM's training sets it for interleaving (parallel_config; finding M12).

Not built: graphs on stages, recap's smaller layer kinds with parameters
inside a tensor-parallel group (only `block` is megatron's own tensor-parallel module),
full-iteration graphs on a group.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from ... import case as case_mod
from ...core import layers as layers_mod
from ...core.layout import (
    PP_SEED_STRIDE,
    Layout,
    dp_problem,
    layer_chunks,
    local_case,
    local_data,
    pp_problem,
    request_dims,
    stage_layers,
)
from ...core.ranks import backend_for
from ...core.records import RunData
from .model import MegatronChunk
from .runner import MegatronRunner
from .sut import MegatronSUT

# recap's kinds a tensor-parallel megatron group runs beside `block`: without parameters, or
# replicated whole on every rank (norms, not with sequence parallelism: a rank sees its rows only)
REPLICATED_KINDS = ("gelu", "dropout")
REPLICATED_WITHOUT_SP = ("layernorm", "rmsnorm")
# virtual stages a group runs with pp > 1 (as the torch driver's groups: the interleaved warmup's
# (V - 1) * P term takes two values)
VP_VALUES = [2, 3]


def group_sizes(world: int) -> List[int]:
    return [d for d in range(2, world + 1) if world % d == 0]


def megatron_tp_problem(c: case_mod.Case, tp: int) -> str:
    """"" when megatron-core's tensor-parallel layers split the case over tp ranks, else one line."""
    for i, l in enumerate(c.layers):
        name = f"{l.kind}{i}"
        if l.kind == "block":
            if l.heads % tp:
                return f"tp {tp}: {name} has {l.heads} heads, not a multiple of {tp}"
            if c.ffn(l) % tp:
                return f"tp {tp}: {name}'s ffn width {c.ffn(l)} is not a multiple of {tp}"
        elif l.kind in REPLICATED_WITHOUT_SP and c.sp:
            return (f"sp with tp {tp}: {name} ({l.kind}) would be a replicated norm on a rank's rows; only "
                    "`block` (TransformerLayer) marks its norms sequence_parallel here")
        elif l.kind not in REPLICATED_KINDS + REPLICATED_WITHOUT_SP:
            return (f"tp {tp}: {name} ({l.kind}) is recap's own module, not a megatron-core tensor-parallel one "
                    "(a megatron rank group splits `block` layers, TransformerLayer)")
    if c.sp and c.tokens % tp:
        return f"sp with tp {tp}: tokens {c.tokens} is not a multiple of {tp} (each rank holds tokens / tp rows)"
    return ""


def tp_sites(c: case_mod.Case, sp: bool) -> List[str]:
    """The draw sites inside tensor-parallel regions: every one with sequence parallelism, else a
    block's attention dropout."""
    return [s.layer for s in case_mod.drop_sites(c)
            if sp or (c.layers[s.top].kind == "block" and s.op == "attn_dropout")]


class _BackwardStarts(torch.autograd.Function):
    """Identity on a pipeline stage's output: its backward is the first of the stage's backward of a
    microbatch (nothing of the stage's has accumulated yet), where the runner says so."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, m: int, started: Any) -> torch.Tensor:
        ctx.m, ctx.started = m, started
        return h.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Tuple[torch.Tensor, None, None]:
        ctx.started(ctx.m)
        return g, None, None


class MegatronRankRunner(MegatronRunner):
    """One rank's run of a case in a megatron-core group (tp x dp x pp, this module's docstring)."""

    def __init__(self, sut: Any, c: case_mod.Case, data: RunData, configs: List[Any], graphed: List[bool],
                 lay: Layout) -> None:
        self.layout = lay
        self.sp_params: List[int] = []
        self.vp = c.vp if lay.pp > 1 else 1
        every = stage_layers(len(c.layers), lay.pp, self.vp)
        # this rank's chunks' layers: virtual stage chunk * pp + stage (one chunk without vp)
        self.spans = [every[k * lay.pp + lay.stage] for k in range(self.vp)]
        self.span = self.spans[0]
        infos = case_mod.param_infos(c)
        # recap's indices of each chunk's parameters (without vp: every one, the other stages' zero)
        self.chunk_params = ([[i for i, p in enumerate(infos) if a <= p.layer < b] for a, b in self.spans]
                             if self.vp > 1 else [list(range(len(infos)))])
        self.schedule: Dict[int, List[Tuple[str, int, int]]] = {}  # per step: the stage's events as they ran
        self.events: List[Tuple[str, int, int]] = []
        # per chunk: the microbatch whose backward ran last, its gradients not copied yet
        self.pending = [-1] * self.vp
        self.fwd_count = [0] * self.vp  # per chunk: the microbatches whose forward ran this step
        self._cur_fwd = -1  # the microbatch whose forward runs (its output is marked with it)
        self.chunks: List[Any] = []
        super().__init__(sut, c, data, configs, graphed)
        self.tp_group = self.api.parallel_state.get_tensor_model_parallel_group()
        if c.sp:
            self.sp_params = [i for i, p in enumerate(self.params) if getattr(p, "sequence_parallel", False)]
        if lay.pp > 1:
            # 1F1B runs several forwards before a backward: a microbatch's gradients are copied when
            # the chunk's next backward starts (a chunk's backwards run one after another), the last
            # ones at finalize
            self.copy_at_forward = False
            for k, m in enumerate(self.chunks or [self.model]):
                m.mark = (lambda k: lambda h: _BackwardStarts.apply(h, self._cur_fwd, lambda mb: self._backward_starts(k, mb)))(k)

    def ddp_modules(self) -> List[Any]:
        """With virtual stages the rank's chunks, each wrapped by its own DDP (Megatron-LM's get_model)."""
        if self.vp == 1:
            return [self.model]
        lay, vp = self.layout, self.vp
        self.chunks = [MegatronChunk(self.model, span, k, first=lay.stage == 0 and k == 0,
                                     last=lay.stage == lay.pp - 1 and k == vp - 1) for k, span in enumerate(self.spans)]
        return self.chunks

    def parallel(self) -> Dict[str, Any]:
        lay = self.layout
        kw: Dict[str, Any] = {"tp": lay.tp, "tp_rank": lay.tp_rank, "sp": self.case.sp, "span": self.span,
                              "first": lay.stage == 0, "last": lay.stage == lay.pp - 1}
        if self.vp > 1:  # each layer's model chunk (TransformerLayer's vp_stage)
            kw["vp_stages"] = layer_chunks(len(self.case.layers), lay.pp, self.vp)
        return kw

    def rng_seed(self) -> int:
        """Megatron-LM's _set_random_seed: seed + 100 * the pipeline rank (every replica alike)."""
        return self.case.seed_rng + PP_SEED_STRIDE * self.layout.stage

    def stage_params(self) -> List[int]:
        return [i for a, b in self.spans for i, p in enumerate(case_mod.param_infos(self.case)) if a <= p.layer < b]

    def forward_microbatch(self, model: Any, prev: int) -> Tuple[int, int]:
        """(microbatch, chunk) of the forward the schedule asks for: the chunk its model is (each
        chunk's forwards run in microbatch order, its data iterator gives them in that order)."""
        k = 0
        if self.vp > 1:
            found = [j for j, d in enumerate(self.ddps) if model is d]
            if not found:  # never guess a chunk: its events and gradients would be another's
                raise RuntimeError("the interleaved schedule ran a forward on a model that is none of this rank's chunks")
            k = found[0]
        if k == 0 and all(n == 0 for n in self.fwd_count):
            self.events = []
            self.schedule[self.pos.step] = self.events
        m = self.fwd_count[k]
        self.fwd_count[k] += 1
        return m, k

    def on_forward(self, m: int, chunk: int = 0) -> None:
        if self.layout.pp > 1:
            self._cur_fwd = m
            self.events.append(("forward", m, chunk))

    def _backward_starts(self, k: int, m: int) -> None:
        if self.pending[k] >= 0:
            self._copy_chunk(self.pending[k], k)
        self.pending[k] = self._cur_mb = m
        self.obs.microbatch = m  # a recompute inside this backward draws for microbatch m
        self.pos.set(pass_="backward", microbatch=m, layer="")
        self.events.append(("backward", m, k))

    def _copy_chunk(self, m: int, k: int) -> None:
        """Microbatch m's accumulated gradients of chunk k's parameters."""
        ids = self.chunk_params[k]
        for i in ids:
            self.gbuf[m][i].copy_(self.model.recap_layout(i, self.params[i].main_grad))
        for i in self.sp_params:  # recap's copy of the rank's rows' part, summed (docstring)
            if i in ids:
                dist.all_reduce(self.gbuf[m][i], group=self.tp_group)

    def _copy_grads(self, m: int) -> None:
        for k in range(self.vp if m >= 0 else 0):
            self._copy_chunk(m, k)

    def _copy_last(self) -> None:
        if self.layout.pp == 1:
            super()._copy_last()
            return
        if not self.copied_last:  # every chunk's last backward's
            for k, m in enumerate(self.pending):
                if m >= 0:
                    self._copy_chunk(m, k)
            self.copied_last = True

    def _after_backwards(self, *args: Any, **kwargs: Any) -> None:
        """finalize_model_grads_func: the last microbatch's own gradients first, then megatron's
        finalize_model_grads (as Megatron-LM's training sets it), then the one-rank driver's work."""
        self._copy_last()
        self.pending = [-1] * self.vp
        self.fwd_count = [0] * self.vp
        if self.sut.backend == "nccl":  # over gloo on CUDA it cannot run, and does nothing (SUT docstring)
            model = args[0] if args else kwargs["model"]
            extra = {"pg_collection": kwargs["pg_collection"]} if kwargs.get("pg_collection") is not None else {}
            self.api.finalize_model_grads(model, None, **extra)
        super()._after_backwards(*args, **kwargs)

    def applied_grads(self) -> List[torch.Tensor]:
        if self.layout.dp == 1:
            return []  # the last microbatch's accumulation is what the update applied
        # (a parameter of no chunk of this rank has no main_grad: zero, as a stage's others' are)
        return [self.model.recap_layout(i, getattr(p, "main_grad", torch.zeros_like(p))) for i, p in enumerate(self.params)]


class MegatronRankSUT(MegatronSUT):
    """One rank's megatron SUT in a rank group (this module's docstring)."""

    def __init__(self, device: str, rank: int, world: int, expect_version: Optional[str] = None) -> None:
        self.rank, self.world = rank, world
        self.shape: Optional[Tuple[int, int, int]] = None  # the (tp, pp, vp) parallel_state was initialized with
        self.pp, self.dp = 1, 1  # the run request's
        self.extras: Dict[str, Any] = {}
        super().__init__(device, expect_version)
        self.backend = backend_for(self.device, world)

    def _init_parallel(self) -> None:
        """The group is joined already (core/ranks.py); parallel_state is set per case (set_shape)."""

    def set_shape(self, tp: int, pp: int, vp: int) -> None:
        ps = self.api.parallel_state
        if self.shape == (tp, pp, vp):
            return
        ps.destroy_model_parallel()
        ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                     virtual_pipeline_model_parallel_size=vp if vp > 1 else None)
        self.shape = (tp, pp, vp)

    def capabilities(self) -> Dict[str, Any]:
        caps = super().capabilities()
        # graphs across ranks need collectives a graph can capture (nccl, a GPU per rank)
        caps["executor"] = ["eager", "per-layer"] if self.backend == "nccl" else ["eager"]
        caps["tp"] = group_sizes(self.world)
        # what megatron_tp_problem lets a tp case hold: recap draws only those (norms: skipped with sp)
        caps["tp_kinds"] = ["block", *REPLICATED_KINDS, *REPLICATED_WITHOUT_SP]
        if self.backend == "nccl":
            # over gloo on CUDA tensors megatron's p2p (pp) and its coalesced grad all-reduce (dp, sp)
            # cannot run (why_skipped): recap draws none of them there
            caps["pp"] = group_sizes(self.world)
            caps["vp"] = VP_VALUES
            caps["dp"] = group_sizes(self.world)
        caps["sp"] = self.sp_supported() and self.backend == "nccl"
        return caps

    def sp_supported(self) -> bool:
        """Whether the local spec's norm takes sequence_parallel: apex's FusedLayerNorm does; without
        apex the spec falls back to WrappedTorchNorm, which asserts "sequence parallel not
        supported by torch LayerNorm" (megatron/core/models/gpt/gpt_layer_specs.py LNImpl)."""
        from megatron.core.models.gpt import gpt_layer_specs

        return bool(getattr(gpt_layer_specs, "HAVE_APEX", False))

    def parallel_config(self, c: case_mod.Case) -> Dict[str, Any]:
        tp = self.world // (self.pp * self.dp)
        kw: Dict[str, Any] = {"tensor_model_parallel_size": tp, "sequence_parallel": bool(c.sp and tp > 1)}
        if self.pp > 1:
            # the model's layer count (every stage's num_layers // pp: the even split stage_layers
            # takes), and the dtype of what the stages send each other (ModelParallelConfig
            # refuses pipeline parallelism without it)
            kw.update(pipeline_model_parallel_size=self.pp, num_layers=len(c.layers),
                      pipeline_dtype=layers_mod.TORCH_DTYPES[c.dtype])
            if c.vp > 1:
                # the interleaved schedule (microbatch_group_size_per_vp_stage: pp, its default), its
                # p2p as Megatron-LM's training configures it (argument_utils.py: batch_p2p_comm = not
                # overlap_p2p_comm, overlap on by default): megatron-core's own defaults (batch on,
                # overlap off) post two sends to the same peer in one batch when pp is 2, which the
                # receiver matches in the other order (Megatron-LM's arguments.py refuses that
                # combination; megatron-core does not: finding M12, results/FINDINGS.md)
                kw.update(virtual_pipeline_model_parallel_size=c.vp, overlap_p2p_comm=True, batch_p2p_comm=False)
        return kw

    def why_skipped(self, c: case_mod.Case) -> str:
        if self.backend != "nccl" and (self.dp > 1 or c.sp):
            # DistributedDataParallel's grad sync all-reduces its buckets inside _coalescing_manager,
            # which calls allreduce_coalesced: gloo's refuses CUDA tensors
            return (f"{'dp ' + str(self.dp) if self.dp > 1 else 'sp'}: megatron-core's finalize_model_grads "
                    "all-reduces the grad buffers with a coalesced all-reduce, which gloo refuses for CUDA tensors "
                    f"(ProcessGroupGloo::allreduce_coalesced); this group's {self.world} ranks share "
                    f"{torch.cuda.device_count()} GPU(s) over gloo")
        if self.pp > 1 and self.backend != "nccl":
            return (f"pp {self.pp}: megatron-core's p2p_communication sends CUDA tensors between stages, which "
                    f"gloo cannot (it hands their device pointers to its TCP transport); this group's "
                    f"{self.world} ranks share {torch.cuda.device_count()} GPU(s) over gloo")
        if c.vp > 1 and self.pp == 1:
            return f"vp {c.vp} without pipeline stages: megatron-core's virtual stages split pp > 1"
        if self.pp > 1 and c.executor != "eager":
            return f"executor {c.executor} with pp {self.pp}: graphs on megatron-core pipeline stages are not built"
        if c.executor == "full-iteration":
            return "executor full-iteration: not built for megatron-core rank groups"
        if c.executor == "per-layer" and self.backend != "nccl":
            return (f"executor per-layer: this group's {self.world} ranks share {torch.cuda.device_count()} GPU(s) "
                    "over gloo, whose collectives a CUDA graph cannot capture (nccl needs a GPU per rank)")
        tp = self.world // (self.pp * self.dp)
        # a replica's share of the microbatches is what its stages' schedule runs (dp first)
        return ((dp_problem(c, self.dp) if self.dp > 1 else "")
                or (pp_problem(local_case(c, self.dp) if self.dp > 1 else c, self.pp) if self.pp > 1 else "")
                or (megatron_tp_problem(c, tp) if tp > 1 else "")
                or super().why_skipped(c))

    def make_runner(self, c: case_mod.Case, data: RunData) -> MegatronRunner:
        tp = self.world // (self.pp * self.dp)
        lay = Layout(tp, self.dp, self.pp, self.rank)
        configs, graphed, reason = self.configs(c if self.dp == 1 else local_case(c, self.dp))
        if reason:
            raise RuntimeError(reason)
        if self.dp > 1:  # the replica's share of the step: its microbatches, numbered from 0
            data = local_data(data, c, self.dp, lay.replica)
            c = local_case(c, self.dp)
            self.extras["rank_dp"] = {"dp": self.dp, "replica": lay.replica, "microbatches": c.microbatches}
        r = MegatronRankRunner(self, c, data, configs, graphed, lay)
        if self.pp > 1:  # core/ranks.merge_pp reads it; the schedule fills as the steps run
            self.extras["rank_pp"] = {"pp": self.pp, "vp": r.vp, "tp": tp, "stage": lay.stage,
                                      "chunk_layers": [list(x) for x in r.spans], "params": r.stage_params(),
                                      "schedule": r.schedule}
        if tp > 1:
            self.extras.update({"rank_shards": r.model.shard_table(), "rank_tp_sites": tp_sites(c, c.sp),
                                "rank_sp": bool(c.sp)})
        return r

    @staticmethod
    def _case_vp(request: Dict[str, Any]) -> int:
        """The requested case's virtual stages (parallel_state is set before the case is parsed;
        a malformed case is refused then)."""
        c = request.get("case")
        v = c.get("vp", 1) if isinstance(c, dict) else 1
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 1 else 1

    def serve_run(self, request: Dict[str, Any], frames: List[Any]) -> Tuple[Dict[str, Any], List[Any]]:
        self.extras = {}
        self.pp, self.dp = request_dims(request)
        vp = self._case_vp(request) if self.pp > 1 else 1
        if self.world % (self.pp * self.dp) == 0 and (self.pp == 1 or self.backend == "nccl"):
            self.set_shape(self.world // (self.pp * self.dp), self.pp, vp)
        h, out = super().serve_run(request, frames)
        h.update(self.extras)  # the leader (core/ranks.merge) moves them into the reply's `ranks`
        return h, out


__all__ = ["MegatronRankSUT", "megatron_tp_problem", "tp_sites"]
