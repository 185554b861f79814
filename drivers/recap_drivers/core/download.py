"""Copies many tensors between host and device with one copy per dtype (to_host, to_device).

A step's observation is every microbatch's gradients, the parameters, the losses and the masks: a
few hundred small tensors. Each `.cpu()` is a synchronizing copy, and with several worker processes
time-slicing one GPU each synchronization waits for this process's turn on it, whatever its size.
One flat buffer per dtype, copied once and split on the host, gives the same bytes with one wait.
The CPU takes the same path (a copy more), so the CPU tests run what the GPU runs.
"""

from __future__ import annotations

from typing import Dict, List, Sequence

import torch


def _by_dtype(tensors: Sequence[torch.Tensor]) -> List[List[int]]:
    """The tensors' indices, grouped by dtype (one copy each), in order within a group."""
    groups: Dict[torch.dtype, List[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype, []).append(i)
    return list(groups.values())


def _split(flat: torch.Tensor, idx: List[int], tensors: Sequence[torch.Tensor], out: List[torch.Tensor],
           clone: bool) -> None:
    """out[i] for i in idx: tensor i's shape over its part of `flat` (a copy of its own if clone)."""
    at = 0
    for i in idx:
        n = tensors[i].numel()
        part = flat[at:at + n].view(tensors[i].shape)
        out[i] = part.clone() if clone else part
        at += n


def to_host(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Host copies of `tensors` (same dtypes, shapes and values, each with storage of its own), in
    order. The tensors may be on different devices; each dtype's are concatenated on the first's."""
    out: List[torch.Tensor] = [torch.empty(0)] * len(tensors)
    for idx in _by_dtype(tensors):
        dev = tensors[idx[0]].device
        flat = torch.cat([tensors[i].detach().reshape(-1).to(dev) for i in idx]).cpu()
        _split(flat, idx, tensors, out, clone=True)
    return out


def to_device(tensors: Sequence[torch.Tensor], device: torch.device) -> List[torch.Tensor]:
    """`tensors` (host tensors) on `device`, in order, with one host-to-device copy per dtype: views
    of one flat device buffer per dtype, same shapes and values. A run request's parameters, inputs
    and targets were copied up one tensor at a time, each copy waiting for this process's turn on a
    GPU that several workers share (`worker.h2d`, 9% of a torch case on the H200)."""
    out: List[torch.Tensor] = [torch.empty(0)] * len(tensors)
    for idx in _by_dtype(tensors):
        flat = torch.cat([tensors[i].detach().reshape(-1) for i in idx]).to(device)
        _split(flat, idx, tensors, out, clone=False)
    return out
