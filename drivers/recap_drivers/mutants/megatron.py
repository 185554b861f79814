"""Mutants of megatron-core: tensor_parallel.random (CheckpointFunction, the RNG tracker) and
DistributedDataParallel's grad buffers. Each install_* patches megatron-core's own code; it is
imported only then."""

from __future__ import annotations

import contextlib
import sys
from types import FrameType
from typing import Any, ContextManager, Dict, Iterator, Optional, Tuple

from .recompute import Fn, Hook, on_recompute

# megatron-core's modules, classes and their instances (`self` of a patched method) are imported at
# run time and untyped: Any here.

# ---- megatron-core tensor_parallel.random ----------------------------------------------------


def _mcore_random() -> Any:
    from megatron.core.tensor_parallel import random as r

    if not hasattr(r, "CheckpointFunction"):
        raise RuntimeError("megatron.core.tensor_parallel.random has no CheckpointFunction")
    return r


def _in_random_py(f: Optional[FrameType], name: str) -> bool:
    return f is not None and f.f_code.co_name == name and f.f_code.co_filename.replace("\\", "/").endswith(
        "megatron/core/tensor_parallel/random.py")


def _called_from_checkpoint_backward() -> bool:
    """The restore before CheckpointFunction's recompute: called by its backward directly (0.15.3
    restores each state there), or through _set_all_rng_states called by it (later versions). Not
    _fork_rng's restore on the way out, nor a tracker fork."""
    f: FrameType = sys._getframe(2)  # 0: here, 1: the patched function, 2: its caller
    if _in_random_py(f, "_set_all_rng_states") and f.f_back is not None:
        f = f.f_back
    return _in_random_py(f, "backward")


def install_mcore_recompute(hook: Hook) -> None:
    r = _mcore_random()
    cf = r.CheckpointFunction
    orig = cf.forward  # a staticmethod: (ctx, run_function, distribute_saved_activations, *args)

    def forward(ctx: Any, run_function: Fn, *rest: Any) -> Any:
        return orig(ctx, on_recompute(run_function, hook), *rest)

    cf.forward = staticmethod(forward)


def install_mcore_tracker_not_restored() -> None:
    r = _mcore_random()
    # the class, not get_cuda_rng_tracker(): that call would initialize the tracker with default
    # arguments before the driver does (and later initializations are ignored: class 23)
    classes = [r.CudaRNGStatesTracker]
    for cls in classes:
        if "set_states" not in cls.__dict__:
            raise RuntimeError(f"{cls.__name__} has no set_states")
        orig = cls.__dict__["set_states"]

        def set_states(self: Any, states: Dict[str, Any], _orig: Fn = orig) -> Any:
            if _called_from_checkpoint_backward():
                return None  # the recompute forks tracker states nobody restored
            return _orig(self, states)

        cls.set_states = set_states


def install_mcore_cuda_rng_not_restored() -> None:
    r = _mcore_random()
    names = set(r.CheckpointFunction.backward.__code__.co_names)
    if not hasattr(r, "_set_cuda_rng_state") or not names & {"_set_cuda_rng_state", "_set_all_rng_states"}:
        raise RuntimeError("CheckpointFunction.backward does not restore through _set_cuda_rng_state")
    orig = r._set_cuda_rng_state

    def _set_cuda_rng_state(*args: Any, **kwargs: Any) -> Any:
        if _called_from_checkpoint_backward():
            return None  # as a saved live handle restores: nothing rewinds
        return orig(*args, **kwargs)

    r._set_cuda_rng_state = _set_cuda_rng_state


def mcore_shift_then_run(fn: Fn, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    import torch

    torch.rand(1, device="cuda")
    try:
        from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

        with get_cuda_rng_tracker().fork():
            torch.rand(1, device="cuda")
    except Exception:  # no tracker state (not initialized): the default generator's shift stays
        pass
    return fn(*args, **kwargs)


# ---- megatron-core: the tracker, the recompute's RNG, DDP's grad buffers ---------------------


def _tracker_class() -> Tuple[Any, Any]:
    r = _mcore_random()
    cls = getattr(r, "CudaRNGStatesTracker", None)
    if cls is None:
        raise RuntimeError("megatron.core.tensor_parallel.random has no CudaRNGStatesTracker")
    return r, cls


def _own(cls: Any, name: str) -> Any:
    if name not in cls.__dict__:
        raise RuntimeError(f"{cls.__name__} has no {name}")
    return cls.__dict__[name]


def install_mcore_tracker_states_live() -> None:
    _, cls = _tracker_class()
    _own(cls, "get_states")
    if "states_" not in getattr(_own(cls, "set_states"), "__code__", compile("", "", "exec")).co_names:
        raise RuntimeError("CudaRNGStatesTracker keeps its states elsewhere than states_")

    def get_states(self: Any) -> Dict[str, Any]:
        return self.states_  # the live dict: the forward's fork exit writes its advance into the snapshot

    setattr(get_states, "recap_mutant", True)
    cls.get_states = get_states


def _fork_name_default(fork: Fn) -> str:
    import inspect

    p = inspect.signature(fork).parameters.get("name")
    if p is None or p.default is inspect.Parameter.empty:
        raise RuntimeError("CudaRNGStatesTracker.fork takes no name with a default")
    return p.default


def install_mcore_fork_not_advancing() -> None:
    import torch

    _, cls = _tracker_class()
    orig = _own(cls, "fork")
    default = _fork_name_default(orig)

    def snap(st: Any) -> Optional[Tuple[str, Any]]:  # a tracker state: a tensor or a generator
        if isinstance(st, torch.Tensor):
            return ("tensor", st)  # a host-mode state is a fresh tensor per fork: keep the old one
        if isinstance(st, torch.Generator) and not torch.cuda.is_current_stream_capturing():
            return ("generator", st.get_state())  # a graph-safe state advances in place: by value
        return None

    @contextlib.contextmanager
    def fork(self: Any, name: str = default) -> Iterator[None]:
        saved = snap(self.states_.get(name))
        with orig(self, name):
            yield
        if saved is None:
            return
        if saved[0] == "tensor":
            self.states_[name] = saved[1]  # the named state is put back: the next fork draws the same
        else:
            self.states_[name].set_state(saved[1])

    setattr(fork, "recap_mutant", True)
    cls.fork = fork


def install_mcore_recompute_default_generator() -> None:
    _, cls = _tracker_class()
    orig = _own(cls, "fork")
    default = _fork_name_default(orig)
    in_recompute = [0]

    def fork(self: Any, name: str = default) -> ContextManager[None]:
        if in_recompute[0]:
            return contextlib.nullcontext()  # the recompute draws from the default generator
        return orig(self, name)

    setattr(fork, "recap_mutant", True)
    cls.fork = fork

    def hook(fn: Fn, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        in_recompute[0] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            in_recompute[0] -= 1

    install_mcore_recompute(hook)


def _ddp_class() -> Any:
    try:
        from megatron.core.distributed import distributed_data_parallel as d
    except ImportError as e:
        raise RuntimeError(f"megatron.core.distributed.distributed_data_parallel: {e}".splitlines()[0])
    cls = getattr(d, "DistributedDataParallel", None)
    if cls is None:
        raise RuntimeError("megatron.core.distributed has no DistributedDataParallel")
    return cls


def install_mcore_grad_buffer_not_zeroed() -> None:
    cls = _ddp_class()
    _own(cls, "zero_grad_buffer")

    def zero_grad_buffer(self: Any, *args: Any, **kwargs: Any) -> None:
        return None  # main_grad keeps the last step's gradients: the next step accumulates onto them

    setattr(zero_grad_buffer, "recap_mutant", True)
    cls.zero_grad_buffer = zero_grad_buffer


# ---- megatron-core rank groups (needs "ranks": frameworks/megatron/ranks.py) -------------------


def install_mcore_tp_seed_shared() -> None:
    """model_parallel_cuda_manual_seed seeds every tensor-parallel rank's 'model-parallel-rng' as
    rank 0's (its tp_rank argument forced to 0): dropout inside tensor-parallel regions draws equal
    masks on every rank (bug class 30)."""
    import megatron.core.tensor_parallel as tp_pkg

    r = _mcore_random()
    orig = getattr(r, "model_parallel_cuda_manual_seed", None)
    if orig is None or "tp_rank" not in orig.__code__.co_varnames:
        raise RuntimeError("megatron.core.tensor_parallel.random.model_parallel_cuda_manual_seed has no tp_rank argument")

    def seeded(*args: Any, **kwargs: Any) -> Any:
        kwargs["tp_rank"] = 0
        return orig(*args, **kwargs)

    setattr(seeded, "recap_mutant", True)
    r.model_parallel_cuda_manual_seed = seeded
    if getattr(tp_pkg, "model_parallel_cuda_manual_seed", None) is orig:  # the package's re-export
        tp_pkg.model_parallel_cuda_manual_seed = seeded


def install_mcore_dp_grads_not_reduced() -> None:
    """DistributedDataParallel.finish_grad_sync does nothing: finalize_model_grads never all-reduces
    the grad buffers over the data-parallel group, each replica applies its own shard's gradient
    (bug class 34)."""
    cls = _ddp_class()
    _own(cls, "finish_grad_sync")

    def finish_grad_sync(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    setattr(finish_grad_sync, "recap_mutant", True)
    cls.finish_grad_sync = finish_grad_sync
