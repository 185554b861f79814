"""megatron-core's rules for laying a case over the ranks of a group, shared by the torch driver
(frameworks/torch: it models megatron with torch alone) and the megatron driver
(frameworks/megatron/ranks.py: megatron does the work, the driver lays the case out the same way):

  Layout         a rank's place: megatron-core's default order "tp-cp-ep-dp-pp"
                 (parallel_state.RankGenerator), the tensor-parallel rank fastest, then the
                 data-parallel replica, then the pipeline stage
  stage_layers   every (virtual) stage's layers: megatron-core's even split
                 (get_transformer_layer_offset)
  pp_problem     why a case's layers do not split into the stages, or ""
  PP_SEED_STRIDE megatron/training/initialize.py _set_random_seed: seed + 100 * the pipeline rank
  dp_problem     why a case's microbatches do not split over the replicas, or ""
  local_case     the case as one replica runs it (its share of the microbatches)
  local_data     a replica's share of the step's data (megatron's data iterators give each
                 replica its shard of the global batch)
  request_dims   a run request's pp and dp (the leader checked them: core/ranks.py GroupSUT.run)
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from .. import case as case_mod
from . import rank_faults
from .records import RunData
from .sut import default_order

# megatron/training/initialize.py _set_random_seed: seed = seed_ + (100 * pipeline rank)
PP_SEED_STRIDE = 100


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


def stage_layers(n_layers: int, pp: int, vp: int = 1) -> List[Tuple[int, int]]:
    """[first, stop) of every virtual stage's layers (v = chunk * pp + stage; vp 1: every stage's):
    megatron-core's even split."""
    k = n_layers // (pp * vp)
    return [(v * k, (v + 1) * k) for v in range(pp * vp)]


def layer_chunks(n_layers: int, pp: int, vp: int) -> List[int]:
    """Each layer's model chunk (TransformerLayer's vp_stage): virtual stage v = chunk * pp + stage
    holds layers v * k .. (stage_layers' even split)."""
    k = n_layers // (pp * vp)
    return [(i // k) // pp for i in range(n_layers)]


def pp_problem(c: case_mod.Case, pp: int) -> str:
    """"" when the case's layers split into pp stages (of c.vp chunks each), else one line naming why."""
    n, vp = len(c.layers), c.vp
    if vp == 1 and n % pp:
        return (f"pp {pp}: {n} layers are not a multiple of {pp} (megatron-core gives every pipeline stage "
                f"num_layers // pp layers and asserts num_layers % pp == 0)")
    if vp > 1 and n % (pp * vp):
        return (f"pp {pp} vp {vp}: {n} layers are not a multiple of {pp * vp} (megatron-core gives every model "
                f"chunk num_layers // pp // vp layers)")
    if vp > 1 and c.microbatches % pp:
        return (f"pp {pp} vp {vp}: {c.microbatches} microbatches are not a multiple of {pp} (megatron-core's "
                f"interleaved schedule refuses a final microbatch group smaller than pp)")
    return ""


def request_dims(request: Dict[str, Any]) -> Tuple[int, int]:
    """A run request's pp and dp, 1 where absent or not an integer above 1."""
    def dim(v: Any) -> int:
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 1 else 1
    return dim(request.get("pp", 1)), dim(request.get("dp", 1))


__all__ = ["Layout", "PP_SEED_STRIDE", "dp_problem", "layer_chunks", "local_case", "local_data", "pp_problem", "request_dims",
           "stage_layers"]
