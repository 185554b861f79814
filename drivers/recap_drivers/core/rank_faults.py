"""Planted rank-group faults (PROTOCOL.md, "Rank groups"), for testing the cross-rank oracles
(core/ranks_check.py) and the group's handling of a lost rank. Off unless RECAP_RANK_FAULT names
one; read once at import (every rank inherits the variable), so that off costs one comparison of a
module constant where a fault could act. A bad value is refused at start-up (exit 2, one line).

  tp-seed-shared       rank 1's tensor-parallel generator is seeded as rank 0's (seed + 2718 + 0):
                       dropout masks inside tensor-parallel regions are equal across ranks, which
                       ranks_check.tp_masks_differ must catch.
  tp-recompute-stale   a checkpoint recomputes with the tracker's current (advanced) tensor-parallel
                       state instead of the one saved at its forward (torch.utils.checkpoint alone,
                       without Megatron's CheckpointFunction tracker handling): recompute masks inside
                       tensor-parallel regions differ from their forward's (ranks_check.recompute_equal).
  dp-seed-per-rank     the shared (default) generator is seeded seed + rank: masks outside
                       tensor-parallel regions differ across ranks (ranks_check.outside_masks_equal).
  tp-grad-not-reduced  the backward of the copy into a tensor-parallel region skips its all-reduce:
                       input gradients are partial sums (ranks_check.grads_match_one_rank).
  pp-stage-seed-shared every pipeline stage's generator is seeded as stage 0's (seed + 100 * 0): stages
                       draw the same stream, which ranks_check.pp_stage_masks_differ must catch.
  pp-send-stale        a stage sends every microbatch after the run's first the previous microbatch's
                       activation (of its step, or the last of the step before): the next stage
                       computes on stale input (grads_match_one_rank; recap's fp64 `training`, whose
                       step 1 microbatch 0 received step 0's last activation).
  pp-schedule-gpipe    every stage runs all forwards, then all backwards (GPipe), not 1F1B (with virtual
                       stages, every chunk of a microbatch in turn): the gradients are right, the order
                       is not (ranks_check.pp_schedule_1f1b).
  vp-chunk-layers-contiguous
                       with virtual stages, rank s's chunk c holds the layers of virtual stage s * vp + c
                       (each rank's layers contiguous) instead of megatron-core's c * pp + s
                       (get_transformer_layer_offset): the pipeline applies the layers out of order
                       (ranks_check.grads_match_one_rank; recap's fp64 `reference`).
  sp-block-no-fork     with sequence parallelism, the layers run outside the tracker's fork (megatron-core
                       0.9.0's TransformerBlock: `with rng_context and fp8_context:` entered the second
                       context alone): every rank's rows and heads draw the shared generator's masks,
                       which ranks_check.tp_masks_differ must catch.
  sp-grad-not-reduced  with sequence parallelism, the gradients of parameters every rank holds whole
                       (norms, row-parallel biases) are not summed over the group: each rank keeps its
                       rows' part (ranks_check.grads_match_one_rank).
  dp-grad-not-reduced  data-parallel replicas skip the all-reduce of their gradients before the update: each
                       applies its own microbatches' sum (ranks_check.dp_grads_reduced, grads_match_one_rank).
  dp-data-same         every data-parallel replica runs replica 0's microbatches (a data loader that ignores
                       the data-parallel rank): the step sums one shard dp times (grads_match_one_rank).
  kill-rank            the last rank SIGKILLs itself in its first forward, after its first layer (of its
                       stage, with pp): the leader must answer with one line naming the rank, and the
                       group exit.
"""

from __future__ import annotations

import os
from typing import Tuple

KINDS = ("tp-seed-shared", "tp-recompute-stale", "dp-seed-per-rank", "tp-grad-not-reduced", "pp-stage-seed-shared",
         "pp-send-stale", "pp-schedule-gpipe", "vp-chunk-layers-contiguous",
         "sp-block-no-fork", "sp-grad-not-reduced", "dp-grad-not-reduced", "dp-data-same", "kill-rank")
ENV = "RECAP_RANK_FAULT"


def parse(text: str) -> Tuple[str, str]:
    """(the fault, "") or ("", the one-line problem); ("", "") when unset."""
    text = text.strip()
    if not text:
        return "", ""
    if text not in KINDS:
        return "", f"{ENV}: unknown fault {text!r} (known: {', '.join(KINDS)})"
    return text, ""


FAULT, PROBLEM = parse(os.environ.get(ENV, ""))
