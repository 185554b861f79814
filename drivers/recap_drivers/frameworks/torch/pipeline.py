"""Pipeline parallelism for the torch driver's rank groups (PROTOCOL.md, "Rank groups"): recap's
stack split into P contiguous stages, one rank each (or into P * V model chunks, V on each rank),
run with megatron-core's non-interleaved 1F1B schedule (or its interleaved one; core/schedules.py
holds both orders), written here with torch alone so that the torch driver runs it on the CPU (gloo).

Stages (core/layout.py stage_layers, pp_problem). megatron-core gives every pipeline rank num_layers
// pp layers, rank s the layers s*k .. (s+1)*k - 1 (transformer_block.py get_num_layers_to_build and
its offset; it asserts num_layers % pipeline_model_parallel_size == 0 without the uneven first/last-
stage options): a case whose layer count is not a multiple of P is skipped naming it. Each layer is
built and computed exactly as one rank builds it (core/layers.py): a stage of tp 1 has no tensor-
parallel region.

The schedule (pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving):
stage s runs min(P - s - 1, M) warmup forwards, then one forward and one backward alternately
until the forwards are done, then the remaining backwards (cooldown); backwards go in microbatch
order on every stage. Activations go forward and their gradients backward with torch.distributed
point-to-point (p2p_communication.py; gloo here): every send is an isend waited at the step's end
(as megatron's batched isend/irecv never block a send on its peer), every receive a blocking recv,
so no order of the two stages' calls can deadlock. The loss (recap's mse) is the last stage's; a
stage's backward is torch.autograd.backward(output, received gradient). Each rank records the
forward and backward events of every step as it runs them (`schedule`), for the oracle that
judges the order from what ran (ranks_check.pp_schedule_1f1b), not from what was asked.

Virtual stages (vp V > 1, megatron-core's virtual_pipeline_model_parallel_size): the layers split
into P * V model chunks of num_layers / (P * V) layers; virtual stage v = c * P + s is chunk c of
rank s (transformer_layer.py get_transformer_layer_offset: vp_stage * (num_layers / V) +
pp_rank * (num_layers / P / V)). Activations go from virtual stage v to v + 1: the last rank's
chunk c sends to the first rank's chunk c + 1. The order is
forward_backward_pipelining_with_interleaving's with microbatch_group_size_per_vp_stage P
(ModelParallelConfig's default; core/schedules.interleaved). The schedule requires M % P == 0
(a final group smaller than P is refused) and layers % (P * V) == 0: a case that breaks either
is skipped naming it. A pair of ranks then carries activations one way and gradients the other
(P = 2, or the wrap from the last rank to the first): each direction has its own tag, so gloo
matches every receive with its send whatever the two ranks' orders. (With the tags removed, the
two ranks' orders were seen to agree anyway: pp 2 and 4, vp 2 and 3, bitwise results.) NCCL,
selected where every rank has its own GPU, ignores tags and is untested here: it runs a
communicator's point-to-point operations in order on one stream, where megatron-core pairs each
send with its receive (batch_isend_irecv); this driver's isend-then-recv may need the same.

Seeds. megatron/training/initialize.py _set_random_seed seeds each pipeline stage with
seed + 100 * pp_rank before model_parallel_cuda_manual_seed: the default generator here is seeded
`seeds.rng + 100 * stage`, so stage 0 draws what one rank draws (for as long as the later stages
draw nothing) and later stages draw their own streams. A checkpointed layer recomputes on its own
stage: torch.utils.checkpoint restores the stage's generator state of that forward.

Tensor parallelism inside the stages (tp T and pp P on T * P ranks, megatron-core's rank order:
the tensor-parallel rank varies fastest): rank r is stage r // T, tensor-parallel rank r % T of its
stage's group; activations go between the ranks of equal tensor-parallel rank of adjacent stages
(as p2p_communication does), each the rank's whole activation, or its rows with sequence
parallelism. frameworks/torch/tensor_parallel.py builds such a stage's layers (TPPipelineRunner).
With dp replicas (frameworks/torch/data_parallel.py) rank r is stage r // (T * dp) and each replica
is its own pipeline: activations go between the ranks of equal replica and tensor-parallel rank.

The reply shape. Every rank builds recap's whole parameter list (so each rank's observation has
the one-rank shape) but runs, and updates, its stage's layers only; the leader (core/ranks.merge)
takes each parameter's gradients and values from the rank of its stage.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from ... import case as case_mod
from ...core import layers as L
from ...core import rank_faults, worker_faults
from ...core.layout import PP_SEED_STRIDE, Layout, stage_layers
from ...core.schedules import Event, gpipe, stage_order
from .runner import TorchRunner

TAG = {"forward": 0, "backward": 1}  # p2p tags: activations and their gradients apart


def plant_kill_rank(layer: Any, rank: int) -> None:
    """Planted kill-rank: `layer`'s forward SIGKILLs this process after computing its output."""
    orig = layer.forward

    def killed(x: torch.Tensor) -> torch.Tensor:
        y = orig(x)
        print(f"recap worker: {rank_faults.ENV} kill-rank: rank {rank} SIGKILLs itself", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        return y

    layer.forward = killed


class PPRunner(TorchRunner):
    """One rank's execution of a case: rank r is stage r // tp (tp 1: the rank is its stage), holding
    the case's vp model chunks c (virtual stages c * pp + stage)."""

    def __init__(self, sut: Any, c: Any, data: Any, pp: int, tp: int = 1, dp: int = 1):
        self.pp, self.tp, self.vp = pp, tp, c.vp
        self.layout = lay = Layout(tp, dp, pp, dist.get_rank())
        self.stage, self.tp_rank, self.replica = lay.stage, lay.tp_rank, lay.replica
        # the ranks of this tensor-parallel rank and replica in the stages before and after (megatron's
        # p2p peers; with virtual stages the first and the last stage are each other's)
        self.prev_peer = lay.rank_of((self.stage - 1) % pp, self.replica, self.tp_rank)
        self.next_peer = lay.rank_of((self.stage + 1) % pp, self.replica, self.tp_rank)
        table = stage_layers(len(c.layers), pp, self.vp)
        if rank_faults.FAULT == "vp-chunk-layers-contiguous":  # planted: chunk c of rank s is virtual stage s * vp + c
            self.spans = [table[self.stage * self.vp + k] for k in range(self.vp)]
        else:
            self.spans = [table[k * pp + self.stage] for k in range(self.vp)]
        self.span = self.spans[0]
        # recap's indices of each chunk's parameters (their gradients are the chunk's to record)
        infos = case_mod.param_infos(c)
        self.chunk_params = [[i for i, p in enumerate(infos) if first <= p.layer < stop] for first, stop in self.spans]
        self.schedule: Dict[int, List[Event]] = {}  # per step: the events as they ran
        self.prev_out: Optional[torch.Tensor] = None  # the last activation sent (planted pp-send-stale)
        super().__init__(sut, c, data)
        self.host_p2p = self.dev.type == "cuda" and dist.get_backend() == "gloo"  # (_recv)

    def make_model(self) -> Any:
        # Runner.__init__ has just seeded seeds.rng: megatron's stage seed replaces it
        stage = 0 if rank_faults.FAULT == "pp-stage-seed-shared" else self.stage  # planted: every stage as stage 0
        torch.manual_seed(self.case.seed_rng + PP_SEED_STRIDE * stage)
        model = L.Model(self.case, self.dev)
        if rank_faults.FAULT == "kill-rank" and self.stage == self.pp - 1:  # planted: the last stage dies
            plant_kill_rank(model.layers[self.span[0]], self.stage)
        return model

    def act_shape(self) -> Tuple[int, ...]:
        """The shape of an activation sent between stages (and of its gradient)."""
        return (self.case.tokens, self.case.hidden)

    def _recv(self, shape: Tuple[int, ...], peer: int, tag: int) -> torch.Tensor:
        """A blocking receive of an activation or its gradient. gloo's send and recv hand the
        tensor's data pointer to its TCP transport with no device handling (ProcessGroupGloo::send,
        recv), so where the ranks share a GPU over gloo the bytes go through host memory."""
        buf = torch.empty(shape, dtype=self.dt, device=torch.device("cpu") if self.host_p2p else self.dev)
        dist.recv(buf, peer, tag=tag)
        return buf.to(self.dev)  # (no copy where it is on the device already)

    def _isend(self, t: torch.Tensor, peer: int, tag: int, keep: List[torch.Tensor]) -> Any:
        """An isend waited at the step's end; `keep` holds what it reads until then."""
        sent = t.cpu() if self.host_p2p else t  # (see _recv)
        keep.append(sent)
        return dist.isend(sent, peer, tag=tag)

    def graphed_layers(self) -> List[int]:
        """Per-layer graphs of this stage's layers only (every chunk's): the others are the other
        stages'. They replay in the stage's schedule order, the sends and receives between them."""
        return [l for first, stop in self.spans for l in range(first, stop) if self.case.layers[l].graphed]

    def stage_params(self) -> List[int]:
        """recap's indices of the parameters of this rank's layers (every chunk's)."""
        return sorted(i for ids in self.chunk_params for i in ids)

    def body(self, call_layer: Any) -> List[Any]:
        c = self.case
        for p in self.params:
            p.grad.zero_()
        M, P, V, s = c.microbatches, self.pp, self.vp, self.stage
        if rank_faults.FAULT == "pp-schedule-gpipe":
            order = gpipe(M, V)
        else:
            order = stage_order(P, s, M, V)
        losses: List[Optional[torch.Tensor]] = [None] * M
        inputs: Dict[Tuple[int, int], torch.Tensor] = {}
        outputs: Dict[Tuple[int, int], torch.Tensor] = {}
        sends: List[Any] = []
        keep: List[torch.Tensor] = []  # what an isend still reads until it is waited
        events: List[Event] = []
        shape = self.act_shape()
        for kind, m, k in order:
            v = k * P + s  # the virtual stage: 0 takes the microbatch, P * V - 1 computes the loss
            is_first, is_last = v == 0, v == P * V - 1
            first, stop = self.spans[k]
            self.obs.microbatch = m
            self.pos.set(pass_=kind, microbatch=m, layer="")
            if kind == "forward":
                if is_first:
                    x = self.inp[m].detach().requires_grad_(True)
                else:
                    x = self._recv(shape, self.prev_peer, TAG["forward"]).requires_grad_(True)
                inputs[(m, k)] = x
                for l in range(first, stop):
                    self.pos.set(pass_="forward", layer=self.layer_names[l])
                    x = call_layer(l, m, x)
                    if worker_faults.pending and l == 0:  # a planted worker fault (PROTOCOL.md)
                        worker_faults.at_forward(self)
                if is_last:
                    self.pos.set(layer="loss")
                    losses[m] = L.mse_loss(x, self.tgt[m])
                    outputs[(m, k)] = losses[m]  # type: ignore[assignment]
                else:
                    out = x.detach().contiguous()
                    # planted pp-send-stale: every activation but the run's first is sent as the one
                    # sent before it (of this step, or the last of the step before)
                    sent = out
                    if rank_faults.FAULT == "pp-send-stale":
                        sent = self.prev_out if self.prev_out is not None else out
                        self.prev_out = out
                    sends.append(self._isend(sent, self.next_peer, TAG["forward"], keep))
                    outputs[(m, k)] = x
            else:
                if is_last:
                    outputs[(m, k)].backward()
                else:
                    torch.autograd.backward(outputs[(m, k)], self._recv(shape, self.next_peer, TAG["backward"]))
                if not is_first:
                    gin = inputs[(m, k)].grad
                    gin = torch.zeros(shape, dtype=self.dt, device=self.dev) if gin is None else gin.contiguous()
                    sends.append(self._isend(gin, self.prev_peer, TAG["backward"], keep))
                del outputs[(m, k)], inputs[(m, k)]
                # microbatch m's gradients of this chunk's parameters: every microbatch up to m summed,
                # as one rank's gradient after microbatch m (a chunk runs its backwards in order)
                for i in self.chunk_params[k]:
                    self.gbuf[m][i].copy_(self.params[i].grad)
            events.append((kind, m, k))
        for w in sends:
            w.wait()
        self.schedule[self.pos.step] = events
        self.body_activations = 0  # not measured across stages (a group serves no measure request)
        self.pos.set(pass_="", layer="", microbatch=-1)
        self.update()
        return losses


def pp_extras(runner: PPRunner) -> Dict[str, Any]:
    """What a stage's observation adds for the leader (core/ranks.merge moves it into `ranks`)."""
    pp, vp = runner.pp, runner.vp
    return {"rank_pp": {"pp": pp, "vp": vp, "tp": runner.tp, "stage": runner.stage,
                        "chunk_layers": [list(x) for x in runner.spans],
                        "params": runner.stage_params(), "schedule": runner.schedule}}
