"""Data parallelism for the torch driver's rank groups (PROTOCOL.md, "Rank groups"): dp replicas of
the case's tp * pp ranks, each running its share of the step's microbatches, their gradients summed
before the update.

Ranks. megatron-core's default order ("tp-cp-ep-dp-pp", parallel_state.RankGenerator): the
tensor-parallel rank varies fastest, then the data-parallel rank, then the pipeline stage, so rank
r is tensor-parallel rank r % tp of replica (r // tp) % dp of stage r // (tp * dp).

Data. megatron splits the global batch over the replicas (each rank's data iterator reads its own
shard): replica d runs the step's microbatches d * M / dp .. (d + 1) * M / dp - 1, as its local
microbatches 0 .. M / dp - 1 (a case whose M is not a multiple of dp is skipped naming it). Each
replica runs megatron's schedule on its own microbatches: forward_backward_no_pipelining (one
forward, one backward per microbatch: a case with another microbatch_order is skipped) or, with
stages, 1F1B over them.

Gradients. After the replica's last backward and before the update, every parameter's gradient is
all-reduced (summed) over the ranks of its data-parallel group (the ranks of equal stage and
tensor-parallel rank): recap's loss sums its microbatches, so the sum, not megatron's average over
the global batch, is what equals one rank's gradient (megatron scales the loss instead). The step's
reported gradient is the reduced one; a microbatch's is its replica's own accumulation up to it.

Seeds. megatron seeds every replica alike (_set_random_seed without data_parallel_random_init):
replica d's j-th microbatch draws what replica 0's j-th draws. One rank draws its microbatches in
sequence from one generator, so a case whose layers draw cannot equal one rank's run
(grads_match_one_rank skips it, naming why); the fp64 oracles apply what each replica drew.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, List

import torch
import torch.distributed as dist

from ... import case as case_mod
from ...core import rank_faults
from ...core.records import RunData
from ...core.sut import default_order


@dataclass(frozen=True)
class Layout:
    """A rank's place in a tp x dp x pp group (megatron-core's rank order)."""

    tp: int
    dp: int
    pp: int
    rank: int

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp

    @property
    def replica(self) -> int:
        return (self.rank // self.tp) % self.dp

    @property
    def stage(self) -> int:
        return self.rank // (self.tp * self.dp)

    def rank_of(self, stage: int, replica: int, tp_rank: int) -> int:
        return (stage * self.dp + replica) * self.tp + tp_rank

    def tp_ranks(self, stage: int, replica: int) -> List[int]:
        return [self.rank_of(stage, replica, t) for t in range(self.tp)]

    def dp_ranks(self, stage: int, tp_rank: int) -> List[int]:
        return [self.rank_of(stage, d, tp_rank) for d in range(self.dp)]


def dp_problem(c: case_mod.Case, dp: int) -> str:
    """"" when the case's microbatches split over dp replicas, else one line naming why."""
    if c.microbatches % dp:
        return (f"dp {dp}: {c.microbatches} microbatches are not a multiple of {dp} (each replica runs "
                f"microbatches / dp of the step's)")
    if c.pp == 1 and c.microbatches > 1 and c.order() != default_order(c):
        return (f"microbatch_order with dp {dp}: each replica runs forward_backward_no_pipelining on its own "
                f"microbatches (one forward, one backward each), not the order {c.order()}")
    return ""


def local_case(c: case_mod.Case, dp: int) -> case_mod.Case:
    """The case as one replica runs it: microbatches / dp microbatches in the default order."""
    loc = copy.deepcopy(c)
    loc.microbatches = c.microbatches // dp
    loc.microbatch_order = []
    return loc


def local_data(data: RunData, c: case_mod.Case, dp: int, replica: int) -> RunData:
    """Replica `replica`'s share of the step's data: its microbatches, numbered from 0."""
    k = c.microbatches // dp
    off = replica * k
    if rank_faults.FAULT == "dp-data-same":  # planted: every replica reads replica 0's microbatches
        off = 0
    inputs = {(s, j): data.inputs[(s, off + j)] for s in range(c.steps) for j in range(k)}
    targets = {(s, j): data.targets[(s, off + j)] for s in range(c.steps) for j in range(k)}
    return RunData(data.params, inputs, targets)


def grad_reducer(params: List[torch.nn.Parameter], which: List[int], group: Any) -> Callable[[], None]:
    """Sums the gradients of params[which] over the data-parallel group (the update's input)."""
    def reduce() -> None:
        if rank_faults.FAULT == "dp-grad-not-reduced":  # planted: each replica keeps its own microbatches' sum
            return
        for i in which:
            dist.all_reduce(params[i].grad, group=group)
    return reduce


__all__ = ["Layout", "dp_problem", "grad_reducer", "local_case", "local_data"]
