"""megatron-core's pipeline schedules as the order of one rank's forward and backward events, for
the driver that runs them (frameworks/torch/pipeline.py) and the oracle that judges what ran
(core/ranks_check.pp_schedule_1f1b). No torch here.

An event is ("forward" | "backward", microbatch, model chunk); chunk 0 without virtual stages.

  one_f_one_b   pipeline_parallel/schedules.py forward_backward_pipelining_without_interleaving:
                min(P - stage - 1, M) warmup forwards, one forward and one backward alternately,
                then the remaining backwards, in microbatch order.
  interleaved   forward_backward_pipelining_with_interleaving (virtual stages V > 1):
                get_schedule_table lists (microbatch, chunk) in groups of
                microbatch_group_size_per_vp_stage microbatches (default P), chunk by chunk;
                get_pp_rank_microbatches gives (P - stage - 1) * 2 + (V - 1) * group warmup
                forwards (at most M * V); then one forward and one backward alternately, then the
                remaining backwards; the k-th backward is the table's k-th microbatch on chunk
                V - 1 - its chunk (get_model_chunk_id with forward False; input_tensors[chunk].pop(0)).
"""

from __future__ import annotations

from typing import List, Tuple

Event = Tuple[str, int, int]  # ("forward" | "backward", microbatch, model chunk)


def one_f_one_b(pp: int, stage: int, microbatches: int) -> List[Event]:
    """The non-interleaved 1F1B order of one stage."""
    warm = min(pp - stage - 1, microbatches)
    out: List[Event] = [("forward", m, 0) for m in range(warm)]
    for i in range(microbatches - warm):
        out += [("forward", warm + i, 0), ("backward", i, 0)]
    out += [("backward", m, 0) for m in range(microbatches - warm, microbatches)]
    return out


def schedule_table(microbatches: int, vp: int, group: int) -> List[Tuple[int, int]]:
    """get_schedule_table: (microbatch, chunk) in forward order; the last group takes what is left."""
    out: List[Tuple[int, int]] = []
    for lo in range(0, microbatches, group):
        hi = microbatches if lo + group >= microbatches else lo + group
        out += [(m, c) for c in range(vp) for m in range(lo, hi)]
    return out


def interleaved(pp: int, stage: int, microbatches: int, vp: int, group: int = 0) -> List[Event]:
    """The interleaved 1F1B order of one rank, microbatch_group_size_per_vp_stage `group` (0: pp)."""
    group = group or pp
    table = schedule_table(microbatches, vp, group)
    total = len(table)
    warm = min((pp - stage - 1) * 2 + (vp - 1) * group, total)
    fwd: List[Event] = [("forward", m, c) for m, c in table]
    bwd: List[Event] = [("backward", m, vp - 1 - c) for m, c in table]
    out = fwd[:warm]
    for k in range(total - warm):
        out += [fwd[warm + k], bwd[k]]
    return out + bwd[total - warm:]


def stage_order(pp: int, stage: int, microbatches: int, vp: int) -> List[Event]:
    """What megatron-core runs on this rank: interleaved with virtual stages, else 1F1B."""
    return interleaved(pp, stage, microbatches, vp) if vp > 1 else one_f_one_b(pp, stage, microbatches)


def gpipe(microbatches: int, vp: int = 1) -> List[Event]:
    """Every forward, then every backward (the planted pp-schedule-gpipe's order)."""
    return ([("forward", m, c) for m in range(microbatches) for c in range(vp)]
            + [("backward", m, c) for m in range(microbatches) for c in reversed(range(vp))])
