"""Mutants of torch.distributed, the collectives a rank group's tensor- and sequence-parallel layers
call (frameworks/torch/tensor_parallel.py looks them up on the module at call time, as megatron-core's
mappings do). Each needs a rank group (`--ranks N`): one rank calls no collective. torch is imported
only when one is installed."""

from __future__ import annotations

from typing import Any


def install_all_reduce_skipped() -> None:
    """all_reduce returns with the tensor unreduced: each rank keeps its partial sum."""
    import torch.distributed as dist

    orig = dist.all_reduce

    def all_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        return None

    setattr(all_reduce, "__wrapped__", orig)
    setattr(dist, "all_reduce", all_reduce)


def install_all_gather_reversed() -> None:
    """all_gather_into_tensor lays the ranks' shards out in reverse rank order."""
    import torch
    import torch.distributed as dist

    orig = dist.all_gather_into_tensor

    def all_gather_into_tensor(output: Any, input: Any, group: Any = None, async_op: bool = False) -> Any:
        work = orig(output, input, group=group, async_op=async_op)
        if work is not None:
            work.wait()
        n = dist.get_world_size(group)
        parts = list(torch.chunk(output, n, dim=0))
        output.copy_(torch.cat(parts[::-1], dim=0))
        return None

    setattr(all_gather_into_tensor, "__wrapped__", orig)
    setattr(dist, "all_gather_into_tensor", all_gather_into_tensor)
