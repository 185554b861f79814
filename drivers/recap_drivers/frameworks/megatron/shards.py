"""Which part of recap's parameter a megatron-core rank holds, in which order (torch only, no
megatron: the CPU tests check it without a GPU).

recap describes a `block`'s parameters in its own layout (core/layers.py): qkv stacks [q | k | v]
by rows, each of `hidden` rows, head n's rows n*dh .. (n+1)*dh of each. Megatron's TransformerLayer
(local spec) holds them as:
  linear_qkv   ColumnParallelLinear: rank r holds heads r*nh/tp .. (r+1)*nh/tp - 1, each head's
               rows [q(dh) k(dh) v(dh)] interleaved (num_query_groups = heads), weight and bias
  linear_proj  RowParallelLinear: weight columns r*H/tp ..; its bias whole on every rank
  linear_fc1   ColumnParallelLinear: weight and bias rows r*F/tp ..
  linear_fc2   RowParallelLinear: weight columns r*F/tp ..; its bias whole
  norms        whole on every rank
A Shard says, for a parameter a rank holds part of: the split dimension and, for each of the
rank's indices along it in megatron's order, the index in recap's full parameter. The rank loads
its part with index_select(dim, index); what it reports is its part in recap's order (the indices
sorted: [q | k | v] of its heads for qkv), which the leader assembles from `ranges` (core/ranks.py
assemble). With tp 1 the qkv shard is the whole parameter, rows permuted: the one-rank driver's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class Shard:
    dim: int
    index: Tuple[int, ...]  # per local index along dim (megatron's order): the full parameter's index

    def ranges(self) -> List[Tuple[int, int]]:
        """The full parameter's indices this shard covers, as [a, b) runs in recap's order."""
        out: List[Tuple[int, int]] = []
        for i in sorted(self.index):
            if out and out[-1][1] == i:
                out[-1] = (out[-1][0], i + 1)
            else:
                out.append((i, i + 1))
        return out

    def positions(self) -> List[int]:
        """Where each local index (megatron's order) goes in the rank's part in recap's order."""
        order = sorted(range(len(self.index)), key=lambda j: self.index[j])
        pos = [0] * len(self.index)
        for p, j in enumerate(order):
            pos[j] = p
        return pos

    def in_order(self) -> bool:
        """Whether megatron's order is recap's already (no permutation to apply)."""
        return all(self.index[j] < self.index[j + 1] for j in range(len(self.index) - 1))


def qkv_rows(hidden: int, heads: int, tp: int = 1, rank: int = 0) -> Tuple[int, ...]:
    """linear_qkv's rows on `rank` of `tp`: per local row (megatron's order, per head [q k v]) the row
    of recap's [q | k | v]."""
    dh = hidden // heads
    local = heads // tp
    return tuple(part * hidden + n * dh + d
                 for n in range(rank * local, (rank + 1) * local) for part in range(3) for d in range(dh))


def _span(size: int, tp: int, rank: int) -> Tuple[int, ...]:
    n = size // tp
    return tuple(range(rank * n, (rank + 1) * n))


def block_shards(hidden: int, heads: int, ffn: int, tp: int, rank: int) -> Dict[str, Optional[Shard]]:
    """A block's parameters (recap's suffixes) on `rank` of `tp`: its Shard, or None where the rank
    holds the whole parameter in recap's order."""
    qkv = Shard(0, qkv_rows(hidden, heads, tp, rank))
    split = tp > 1
    return {
        ".ln1.weight": None, ".ln1.bias": None,
        ".attn.qkv.weight": qkv, ".attn.qkv.bias": qkv,
        ".attn.proj.weight": Shard(1, _span(hidden, tp, rank)) if split else None, ".attn.proj.bias": None,
        ".ln2.weight": None, ".ln2.bias": None,
        ".mlp.fc1.weight": Shard(0, _span(ffn, tp, rank)) if split else None,
        ".mlp.fc1.bias": Shard(0, _span(ffn, tp, rank)) if split else None,
        ".mlp.fc2.weight": Shard(1, _span(ffn, tp, rank)) if split else None, ".mlp.fc2.bias": None,
    }


def shard_row(i: int, every: List[Optional[Shard]]) -> Dict[str, object]:
    """Parameter i's row of the rank group's `shards` table (PROTOCOL.md, "Rank groups") from every
    rank's Shard: the split dimension and each rank's ranges, or dim null (every rank holds it whole)."""
    if not every or any(s is None for s in every) or len(every) == 1:
        return {"param": i, "dim": None, "ranges": []}
    dims = {s.dim for s in every if s is not None}
    if len(dims) != 1:
        raise ValueError(f"parameter {i}: ranks split it along different dimensions {sorted(dims)}")
    return {"param": i, "dim": dims.pop(), "ranges": [[[a, b] for a, b in s.ranges()] for s in every if s is not None]}
