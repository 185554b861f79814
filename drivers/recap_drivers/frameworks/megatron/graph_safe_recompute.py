"""A recompute for megatron-core that keeps its saving inside per-layer CUDA graphs (issue 19,
point 2): the patch a user would apply, installed when the worker starts with
RECAP_MEGATRON_RECOMPUTE=graph-safe (unset: nothing here is imported). It replaces
megatron.core.tensor_parallel.checkpoint, which every Megatron module calls through the package
attribute (attention.py, transformer_layer.py, recompute.py, the driver's smaller kinds).

Why each part (docs/recompute-and-rng.md; results/FINDINGS.md M1-M3, F1):
- It checkpoints in every phase. PR #3919 (0.18+) runs the function plainly during graph warmup and
  capture, so the captured forward keeps every activation (M3); before it, CheckpointFunction fails
  there (M2).
- Non-reentrant (torch.utils.checkpoint, use_reentrant=False, saved-tensor hooks). Megatron computes
  the backward of graph warmup and capture with torch.autograd.grad, which CheckpointFunction refuses
  ("Checkpointing is not compatible with .grad()", M2).
- The recompute draws the forward's random numbers. Outside graphs the generators' states are kept
  by value (get_state / set_state). Megatron's tracker keeps live generator handles, which restore
  nothing (M1).
- Inside graphs, host state cannot do it. A kernel captured into a graph draws from the generator's
  device-side base offset (offset_extragraph, written by every replay's prologue from the host
  offset) plus the intragraph offset it had at capture. The forward graph and the backward graph
  replay at different host offsets (F1's mechanism). So the forward graph copies its base aside at
  the region's start, a copy captured into it. Before the recompute, the backward graph writes that
  base plus (a - b) into the offset, where a is the forward's intragraph offset at the region's
  start and b is the backward's own there. After the recompute it puts its own base back. On every
  replay the recompute draws exactly the forward's Philox range, with no host work between replays.
  Megatron registers every tracker state and the default generator with both graphs
  (create_fwd_graph / create_bwd_graph), so every generator a region draws from has the offset
  tensor.
- torch 2.11 gives Python no handle on that tensor. A small C++ extension reads it through the
  public CUDAGeneratorImpl::philox_cuda_state(0): under capture that call returns the device
  pointers and the intragraph offset, and advances nothing. It is built with load_inline on first
  use (RECAP_EXT_DIR: a build folder shared by a campaign's workers).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Tuple

import torch

_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>

// (seed tensor, offset tensor, intragraph offset) of a CUDA generator while its stream captures:
// the device words every replay's prologue writes and captured kernels read. Outside a capture:
// (empty, empty, host offset). philox_cuda_state(0) advances nothing.
std::tuple<torch::Tensor, torch::Tensor, int64_t> philox_state(const at::Generator& gen, bool capturing) {
  auto* g = at::check_generator<at::CUDAGeneratorImpl>(gen);
  std::lock_guard<std::mutex> lock(g->mutex_);
  at::PhiloxCudaState s = g->philox_cuda_state(0);
  TORCH_CHECK(s.captured_ == capturing, "recap philox_state: the generator ",
              s.captured_ ? "is" : "is not", " capturing, the caller thinks otherwise");
  if (!s.captured_) return {torch::Tensor(), torch::Tensor(), static_cast<int64_t>(s.offset_.val)};
  auto opts = torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA, g->device().index());
  return {torch::from_blob(s.seed_.ptr, {1}, opts), torch::from_blob(s.offset_.ptr, {1}, opts),
          static_cast<int64_t>(s.offset_intragraph_)};
}
"""

_ext: Any = None


def extension() -> Any:
    """The compiled extension (built once per build folder; a later worker loads it)."""
    global _ext
    if _ext is None:
        from torch.utils.cpp_extension import load_inline

        build = os.environ.get("RECAP_EXT_DIR") or None
        if build:
            os.makedirs(build, exist_ok=True)
        _ext = load_inline(name="recap_philox_state", cpp_sources=[_SRC], functions=["philox_state"],
                           with_cuda=True, build_directory=build, verbose=False)
    return _ext


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _cuda_default_generator() -> torch.Generator:
    torch.cuda.init()  # default_generators is empty until CUDA is initialized
    return torch.cuda.default_generators[torch.cuda.current_device()]


class _RngRecord:
    """What one checkpoint call needs to make its recompute draw its forward's numbers: the
    contexts torch.utils.checkpoint enters around the forward and around each recompute."""

    def __init__(self, tracker: Any, set_checkpointing: Callable[[bool], None],
                 default_generator: Callable[[], torch.Generator]) -> None:
        self.tracker = tracker
        self.set_checkpointing = set_checkpointing
        self.default_generator = default_generator
        self.captured = False
        self.tracker_states: Dict[str, Any] = {}
        self.values: List[Tuple[torch.Generator, torch.Tensor]] = []  # eager: states by value
        self.bases = torch.empty(0)  # captured: each generator's base offset at the forward
        self.intragraph: List[Tuple[torch.Generator, int]] = []  # captured: its intragraph offset there

    def generators(self) -> List[torch.Generator]:
        gens = [self.default_generator()]
        for st in self.tracker.get_states().values():
            if isinstance(st, torch.Generator) and all(st is not g for g in gens):
                gens.append(st)
        return gens

    def contexts(self) -> Tuple[Any, Any]:
        return _Forward(self), _Recompute(self)


class _Forward:
    def __init__(self, rec: _RngRecord) -> None:
        self.rec = rec

    def __enter__(self) -> None:
        rec = self.rec
        rec.captured = _capturing()
        # Tensor-valued tracker states (use_cudagraphable_rng=False) are replaced, never mutated,
        # by fork(): a shallow copy of the dictionary keeps them by value.
        rec.tracker_states = dict(rec.tracker.get_states())
        if rec.captured:
            ext = extension()
            gens = rec.generators()
            states = [ext.philox_state(g, True) for g in gens]
            # One captured copy of every generator's base, refreshed by every replay: one
            # allocation (the caching allocator's smallest block is 512 bytes) per checkpoint.
            rec.bases = torch.cat([off for _seed, off, _a in states])
            rec.intragraph = [(g, a) for g, (_seed, _off, a) in zip(gens, states)]
        else:
            rec.values = [(g, g.get_state()) for g in rec.generators()]
        rec.set_checkpointing(True)

    def __exit__(self, *exc: Any) -> None:
        self.rec.set_checkpointing(False)


def _copy_back(dst: torch.Tensor, src: torch.Tensor) -> Callable[[], None]:
    def undo() -> None:
        dst.copy_(src)

    return undo


def _state_back(g: torch.Generator, state: torch.Tensor) -> Callable[[], None]:
    def undo() -> None:
        g.set_state(state)

    return undo


class _Recompute:
    def __init__(self, rec: _RngRecord) -> None:
        self.rec = rec
        self.undo: List[Callable[[], None]] = []

    def __enter__(self) -> None:
        rec = self.rec
        capturing = _capturing()
        if capturing != rec.captured:
            raise RuntimeError(
                "graph-safe recompute: the forward ran " + ("inside" if rec.captured else "outside") +
                " a CUDA graph capture and its recompute " + ("inside" if capturing else "outside") +
                " one; it can restore the random state only when both are captured or neither is")
        self.undo = []
        states = dict(rec.tracker.get_states())
        rec.tracker.set_states(dict(rec.tracker_states))
        self.undo.append(lambda: rec.tracker.set_states(states))
        if rec.captured:
            ext = extension()
            for i, (g, a) in enumerate(rec.intragraph):
                _seed, off, b = ext.philox_state(g, True)
                own = off.clone()
                off.copy_(rec.bases[i:i + 1] + (a - b))
                self.undo.append(_copy_back(off, own))
                # During capture get_state/set_state read and move the intragraph offset (torch
                # 2.10+): put it back after the recompute, so the backward graph advances the
                # generator by what it draws besides the recompute, as an eager recompute leaves it.
                self.undo.append(_state_back(g, g.get_state()))
        else:
            for g, v in rec.values:
                now = g.get_state()
                g.set_state(v)
                self.undo.append(_state_back(g, now))
        rec.set_checkpointing(True)

    def __exit__(self, *exc: Any) -> None:
        self.rec.set_checkpointing(False)
        for u in reversed(self.undo):
            u()
        self.undo = []


def checkpoint_with(tracker: Callable[[], Any], set_checkpointing: Callable[[bool], None],
                    default_generator: Callable[[], torch.Generator] = _cuda_default_generator) -> Callable[..., Any]:
    """checkpoint(function, distribute_saved_activations, *args) with Megatron's signature,
    recomputing in every phase, graphs included; `tracker` gives the RNG states tracker (Megatron's
    get_cuda_rng_tracker)."""

    def checkpoint(function: Callable[..., Any], distribute_saved_activations: bool, *args: Any) -> Any:
        if distribute_saved_activations:
            raise NotImplementedError("graph-safe recompute: distribute_saved_activations (tensor "
                                      "parallelism's split inputs) is not supported")
        rec = _RngRecord(tracker(), set_checkpointing, default_generator)
        return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False,
                                                 preserve_rng_state=False, context_fn=rec.contexts)

    return checkpoint


def make_checkpoint(tensor_parallel: Any) -> Callable[..., Any]:
    """The replacement of megatron.core.tensor_parallel.checkpoint."""
    random = tensor_parallel.random

    def set_checkpointing(on: bool) -> None:  # Megatron's is_checkpointing(), as CheckpointFunction sets it
        (random._set_checkpointing if on else random._unset_checkpointing)()

    ck = checkpoint_with(tensor_parallel.get_cuda_rng_tracker, set_checkpointing)
    ck.__recap_graph_safe__ = True  # type: ignore[attr-defined]
    return ck


def install(tensor_parallel: Any) -> None:
    """Replaces the package's checkpoint and random.checkpoint (the name Megatron's modules call)."""
    if torch.cuda.is_available():
        extension()  # built or loaded now: never for the first time inside a capture
    ck = make_checkpoint(tensor_parallel)
    tensor_parallel.checkpoint = ck
    tensor_parallel.random.checkpoint = ck
