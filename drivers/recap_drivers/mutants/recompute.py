"""What a mutated recompute does instead (shared by the torch and megatron-core mutants): each
hook(fn, args, kwargs) runs a checkpoint's recompute the way a real bug did. Imports torch only
when a hook runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Tuple

if TYPE_CHECKING:  # imported when a hook runs, not with this module
    import torch

# A checkpointed function and its arguments are whatever the framework checkpoints (tensors, flags).
Fn = Callable[..., Any]
Hook = Callable[[Fn, Tuple[Any, ...], Dict[str, Any]], Any]


def on_recompute(fn: Fn, hook: Hook) -> Fn:
    """fn as a checkpoint sees it: the first call is the forward, later ones are recomputes, which
    go through hook(fn, args, kwargs) instead. A checkpoint makes one wrapper per forward."""
    calls = [0]

    def run(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            return fn(*args, **kwargs)
        return hook(fn, args, kwargs)

    return run


def _params_of(fn: Fn) -> List[torch.nn.Parameter]:
    """The parameters a checkpointed function computes with: a module's, or those of the modules
    its closure or bound self holds (megatron's `custom(hidden_states)` closures)."""
    import torch.nn as nn

    holders = [fn, getattr(fn, "__self__", None)]
    holders += [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _cell_set(c)]
    out: List[torch.nn.Parameter] = []
    seen = set()
    for h in holders:
        if isinstance(h, nn.Module):
            for p in h.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
    return out


def _cell_set(c: Any) -> bool:  # a closure cell
    try:
        c.cell_contents
        return True
    except ValueError:
        return False


def recompute_without_param_grads(fn: Fn, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    # Megatron-LM #6373: the recompute's graph does not reach the region's parameters, so the
    # backward through it produces no weight gradient for them.
    ps = [p for p in _params_of(fn) if p.requires_grad]
    for p in ps:
        p.requires_grad_(False)
    try:
        return fn(*args, **kwargs)
    finally:
        for p in ps:
            p.requires_grad_(True)


def recompute_inputs_detached(fn: Fn, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    # The recompute runs on copies of its inputs cut from the graph the checkpoint's backward reads
    # their .grad from: the region's input gets no gradient, so everything before it loses its own.
    import torch

    return fn(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)


def _devices_of(args: Tuple[Any, ...]) -> List[torch.device]:
    import torch

    devs = {a.device for a in args if isinstance(a, torch.Tensor)}
    return sorted(devs, key=str) or [torch.device("cpu")]


def shift_then_run(fn: Fn, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    # One extra draw before the recompute: every mask it draws comes from the next Philox block
    # (CUDA) or the next values (CPU) of the state the checkpoint restored.
    import torch

    for d in _devices_of(args):
        torch.rand(1, device=d)
    return fn(*args, **kwargs)


def fresh_generator_then_run(fn: Fn, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    # The recompute draws from a generator seeded afresh, not from the state saved at forward.
    import torch

    torch.manual_seed(torch.initial_seed())
    return fn(*args, **kwargs)
