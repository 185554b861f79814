"""Pipeline parallelism for the torch driver's rank groups (PROTOCOL.md, "Rank groups"): recap's
stack split into P contiguous stages, one rank each, run with megatron-core's non-interleaved 1F1B
schedule, written here with torch alone so that the torch driver runs it on the CPU (gloo).

Stages. megatron-core gives every pipeline rank num_layers // pp layers, rank s the layers
s*k .. (s+1)*k - 1 (transformer_block.py get_num_layers_to_build and its offset; it asserts
num_layers % pipeline_model_parallel_size == 0 without the uneven first/last-stage options): a case
whose layer count is not a multiple of P is skipped naming it. Each layer is built and computed
exactly as one rank builds it (core/layers.py): a stage of tp 1 has no tensor-parallel region.

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
from .runner import TorchRunner

# megatron/training/initialize.py _set_random_seed: seed = seed_ + (100 * pipeline rank)
PP_SEED_STRIDE = 100

Event = Tuple[str, int]  # ("forward" | "backward", microbatch)


def stage_layers(n_layers: int, pp: int) -> List[Tuple[int, int]]:
    """[first, stop) of every stage's layers: megatron-core's even split."""
    k = n_layers // pp
    return [(s * k, (s + 1) * k) for s in range(pp)]


def pp_problem(c: case_mod.Case, pp: int) -> str:
    """"" when the case's layers split into pp stages, else one line naming why."""
    n = len(c.layers)
    if n % pp:
        return (f"pp {pp}: {n} layers are not a multiple of {pp} (megatron-core gives every pipeline stage "
                f"num_layers // pp layers and asserts num_layers % pp == 0)")
    return ""


def one_f_one_b(pp: int, stage: int, microbatches: int) -> List[Event]:
    """megatron-core's non-interleaved 1F1B order of one stage: warmup forwards, steady 1F1B, cooldown."""
    warm = min(pp - stage - 1, microbatches)
    out: List[Event] = [("forward", m) for m in range(warm)]
    f = warm
    b = 0
    for _ in range(microbatches - warm):
        out.append(("forward", f))
        f += 1
        out.append(("backward", b))
        b += 1
    for _ in range(warm):
        out.append(("backward", b))
        b += 1
    return out


def gpipe(microbatches: int) -> List[Event]:
    """Every forward, then every backward (the planted pp-schedule-gpipe's order)."""
    return [("forward", m) for m in range(microbatches)] + [("backward", m) for m in range(microbatches)]


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
    """One stage's execution of a case: rank r is stage r // tp (tp 1: the rank is its stage)."""

    def __init__(self, sut: Any, c: Any, data: Any, pp: int, tp: int = 1):
        self.pp, self.tp = pp, tp
        rank = dist.get_rank()
        self.stage, self.tp_rank = rank // tp, rank % tp
        # the ranks of this tensor-parallel rank in the stages before and after (megatron's p2p peers)
        self.prev_peer, self.next_peer = rank - tp, rank + tp
        self.span = stage_layers(len(c.layers), pp)[self.stage]
        self.schedule: Dict[int, List[Event]] = {}  # per step: the events as they ran
        self.prev_out: Optional[torch.Tensor] = None  # the last activation sent (planted pp-send-stale)
        super().__init__(sut, c, data)

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

    def stage_params(self) -> List[int]:
        """recap's indices of the parameters of this stage's layers."""
        first, stop = self.span
        return [i for i, p in enumerate(case_mod.param_infos(self.case)) if first <= p.layer < stop]

    def body(self, call_layer: Any) -> List[Any]:
        c = self.case
        for p in self.params:
            p.grad.zero_()
        M, P, s = c.microbatches, self.pp, self.stage
        first, stop = self.span
        is_first, is_last = s == 0, s == P - 1
        order = gpipe(M) if rank_faults.FAULT == "pp-schedule-gpipe" else one_f_one_b(P, s, M)
        losses: List[Optional[torch.Tensor]] = [None] * M
        inputs: Dict[int, torch.Tensor] = {}
        outputs: Dict[int, torch.Tensor] = {}
        sends: List[Any] = []
        keep: List[torch.Tensor] = []  # what an isend still reads until it is waited
        events: List[Event] = []
        shape = self.act_shape()
        for kind, m in order:
            self.obs.microbatch = m
            self.pos.set(pass_=kind, microbatch=m, layer="")
            if kind == "forward":
                if is_first:
                    x = self.inp[m].detach().requires_grad_(True)
                else:
                    buf = torch.empty(shape, dtype=self.dt, device=self.dev)
                    dist.recv(buf, self.prev_peer)
                    x = buf.requires_grad_(True)
                inputs[m] = x
                for l in range(first, stop):
                    self.pos.set(pass_="forward", layer=self.layer_names[l])
                    x = call_layer(l, m, x)
                    if worker_faults.pending and l == 0:  # a planted worker fault (PROTOCOL.md)
                        worker_faults.at_forward(self)
                if is_last:
                    self.pos.set(layer="loss")
                    losses[m] = L.mse_loss(x, self.tgt[m])
                    outputs[m] = losses[m]  # type: ignore[assignment]
                else:
                    out = x.detach().contiguous()
                    # planted pp-send-stale: every microbatch but the run's first is sent the previous
                    # one's activation (of this step, or the last microbatch of the step before)
                    sent = out
                    if rank_faults.FAULT == "pp-send-stale":
                        sent = self.prev_out if self.prev_out is not None else out
                        self.prev_out = out
                    keep.append(sent)
                    sends.append(dist.isend(sent, self.next_peer))
                    outputs[m] = x
            else:
                if is_last:
                    outputs[m].backward()
                else:
                    g = torch.empty(shape, dtype=self.dt, device=self.dev)
                    dist.recv(g, self.next_peer)
                    torch.autograd.backward(outputs[m], g)
                if not is_first:
                    gin = inputs[m].grad
                    gin = torch.zeros(shape, dtype=self.dt, device=self.dev) if gin is None else gin.contiguous()
                    keep.append(gin)
                    sends.append(dist.isend(gin, self.prev_peer))
                del outputs[m], inputs[m]
                for i, p in enumerate(self.params):
                    self.gbuf[m][i].copy_(p.grad)
            events.append((kind, m))
        for w in sends:
            w.wait()
        self.schedule[self.pos.step] = events
        self.body_activations = 0  # not measured across stages (a group serves no measure request)
        self.pos.set(pass_="", layer="", microbatch=-1)
        with torch.no_grad():
            for p in self.params:
                p.add_(p.grad, alpha=-c.lr)
        return losses


def pp_extras(runner: PPRunner) -> Dict[str, Any]:
    """What a stage's observation adds for the leader (core/ranks.merge moves it into `ranks`)."""
    return {"rank_pp": {"pp": runner.pp, "tp": runner.tp, "stage": runner.stage,
                        "stage_layers": [list(x) for x in stage_layers(len(runner.case.layers), runner.pp)],
                        "params": runner.stage_params(), "schedule": runner.schedule}}
