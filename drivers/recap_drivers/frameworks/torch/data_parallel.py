"""Data parallelism for the torch driver's rank groups (PROTOCOL.md, "Rank groups"): dp replicas of
the case's tp * pp ranks, each running its share of the step's microbatches, their gradients summed
before the update.

Ranks (core/layout.py Layout, shared with the megatron driver). megatron-core's default order
("tp-cp-ep-dp-pp", parallel_state.RankGenerator): the tensor-parallel rank varies fastest, then
the data-parallel rank, then the pipeline stage, so rank r is tensor-parallel rank r % tp of
replica (r // tp) % dp of stage r // (tp * dp).

Data (core/layout.py local_case, local_data). megatron splits the global batch over the replicas
(each rank's data iterator reads its own shard): replica d runs the step's microbatches d * M / dp
.. (d + 1) * M / dp - 1, as its local microbatches 0 .. M / dp - 1 (a case whose M is not a multiple
of dp is skipped naming it). Each replica runs megatron's schedule on its own microbatches:
forward_backward_no_pipelining (one forward, one backward per microbatch: a case with another
microbatch_order is skipped) or, with stages, 1F1B over them.

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

from typing import Any, Callable, List

import torch
import torch.distributed as dist

from ...core import rank_faults
from ...core.layout import Layout, dp_problem, local_case, local_data


def grad_reducer(params: List[torch.nn.Parameter], which: List[int], group: Any) -> Callable[[], None]:
    """Sums the gradients of params[which] over the data-parallel group (the update's input)."""
    def reduce() -> None:
        if rank_faults.FAULT == "dp-grad-not-reduced":  # planted: each replica keeps its own microbatches' sum
            return
        for i in which:
            dist.all_reduce(params[i].grad, group=group)
    return reduce


__all__ = ["Layout", "dp_problem", "grad_reducer", "local_case", "local_data"]  # (the first four: core/layout.py)
