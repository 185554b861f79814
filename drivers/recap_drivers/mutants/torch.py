"""Mutants of torch: torch.utils.checkpoint and torch's CUDA graphs (make_graphed_callables,
CUDAGraph.replay). Each install_* patches torch's own function; torch is imported only then."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from .recompute import Fn, Hook, on_recompute

if TYPE_CHECKING:  # imported when a mutant is installed, not with this module
    import torch

# What a patch does to a call: patched functions take what torch's take (hence Any).
Transform = Callable[[Fn, Dict[str, Any]], Fn]  # (checkpointed function, checkpoint's kwargs) -> function
WrapCall = Callable[[Fn, Tuple[Any, ...], Dict[str, Any]], Any]  # (original, args, kwargs) -> result

# ---- torch.utils.checkpoint ------------------------------------------------------------------


def _patch_torch_checkpoint(transform: Transform) -> None:
    """torch.utils.checkpoint.checkpoint(function, *args, **kw) -> transform(function, kw) first.
    Callers look it up on the module at call time (the drivers' core/layers.py does)."""
    import torch.utils.checkpoint as cp

    orig = cp.checkpoint

    def checkpoint(function: Fn, *args: Any, **kwargs: Any) -> Any:
        function = transform(function, kwargs)
        return orig(function, *args, **kwargs)

    setattr(checkpoint, "__wrapped__", orig)
    setattr(checkpoint, "recap_mutant", True)
    setattr(cp, "checkpoint", checkpoint)


def install_no_preserve() -> None:
    def t(function: Fn, kwargs: Dict[str, Any]) -> Fn:
        kwargs["preserve_rng_state"] = False
        return function

    _patch_torch_checkpoint(t)


def install_torch_recompute(hook: Hook, reentrant_only: bool = False) -> None:
    def t(function: Fn, kwargs: Dict[str, Any]) -> Fn:
        if reentrant_only and kwargs.get("use_reentrant") is False:
            return function
        return on_recompute(function, hook)

    _patch_torch_checkpoint(t)


def install_cpu_state_only() -> None:
    import torch.utils.checkpoint as cp

    if not hasattr(cp, "set_device_states"):
        raise RuntimeError("torch.utils.checkpoint has no set_device_states")

    def set_device_states(devices: Any, states: Any, *, device_type: Optional[str] = None) -> None:
        return None  # the device generators keep whatever state the backward left them in

    setattr(set_device_states, "recap_mutant", True)
    setattr(cp, "set_device_states", set_device_states)


# ---- torch CUDA graphs -----------------------------------------------------------------------


def _patch_cuda_graph_replay(make: Callable[[Fn], Fn]) -> None:
    """torch._C._CUDAGraph.replay, the C++ method below torch.cuda.CUDAGraph.replay (which the
    driver's observer wraps to count replays: it still sees every call)."""
    import torch

    base = torch._C._CUDAGraph
    orig = base.replay
    setattr(base, "replay", make(orig))


def install_replay_skipped() -> None:
    calls = [0]

    def make(orig: Fn) -> Fn:
        def replay(self: torch._C._CUDAGraph) -> None:
            calls[0] += 1
            if calls[0] % 2 == 0:
                return None  # every second replay launches nothing: its outputs are the last replay's
            return orig(self)

        return replay

    _patch_cuda_graph_replay(make)


def install_replay_rng_frozen() -> None:
    import torch

    def make(orig: Fn) -> Fn:
        def replay(self: torch._C._CUDAGraph) -> None:
            gens = list(torch.cuda.default_generators)
            saved = [g.get_state() for g in gens]
            orig(self)
            for g, s in zip(gens, saved):
                g.set_state(s)  # the prologue's advance is undone: the next replay draws the same

        return replay

    _patch_cuda_graph_replay(make)


def _mgc_module() -> Any:  # torch.cuda.graphs, whose functions the mutants replace
    import torch.cuda.graphs as graphs

    if not hasattr(graphs, "make_graphed_callables"):
        raise RuntimeError("torch.cuda.graphs has no make_graphed_callables")
    return graphs


def _patch_mgc(wrap_call: WrapCall) -> None:
    """torch.cuda.make_graphed_callables (both names torch exports) -> wrap_call(orig, args, kw)."""
    import torch

    graphs = _mgc_module()
    orig = graphs.make_graphed_callables

    def make_graphed_callables(*args: Any, **kwargs: Any) -> Any:
        return wrap_call(orig, args, kwargs)

    setattr(make_graphed_callables, "__wrapped__", orig)
    graphs.make_graphed_callables = make_graphed_callables
    setattr(torch.cuda, "make_graphed_callables", make_graphed_callables)


def _freevars(fn: Any) -> Dict[str, Any]:  # fn: any callable; its closure cells
    code = getattr(fn, "__code__", None)
    if code is None or not fn.__closure__:
        return {}
    return dict(zip(code.co_freevars, fn.__closure__))


def install_static_input_stale() -> None:
    graphs = _mgc_module()
    inner = [c for c in graphs.make_graphed_callables.__code__.co_consts
             if getattr(c, "co_name", "") == "make_graphed_autograd_function"]
    if not inner or "len_user_args" not in inner[0].co_cellvars:
        raise RuntimeError("torch.cuda.make_graphed_callables copies static inputs in a way this mutant "
                           "does not know (no len_user_args)")

    def len_cell(graphed_fn: Fn) -> Any:  # the closure cell of len_user_args, or None
        graphed_cls = _freevars(graphed_fn).get("Graphed")
        fwd = getattr(graphed_cls.cell_contents, "forward", None) if graphed_cls else None
        return _freevars(fwd).get("len_user_args") if fwd else None

    def stale_after_first(graphed_fn: Fn) -> Fn:
        cell = len_cell(graphed_fn)
        if cell is None:
            raise RuntimeError("graphed callable without a len_user_args closure")
        calls = [0]

        def run(*a: Any, **k: Any) -> Any:
            calls[0] += 1
            out = graphed_fn(*a, **k)
            if calls[0] == 1:
                cell.cell_contents = 0  # Graphed.forward copies no user input into its static inputs
            return out

        return run

    def wrap_call(orig: Fn, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        import torch.nn as nn

        ret = orig(*args, **kwargs)
        one = not isinstance(ret, tuple)
        out: List[Any] = []
        for r in ([ret] if one else list(ret)):
            if isinstance(r, nn.Module):
                g = _freevars(r.forward).get("graphed")
                if g is not None:
                    r.forward = _module_forward(r, stale_after_first(g.cell_contents))
                out.append(r)
            else:
                out.append(stale_after_first(r))
        return out[0] if one else tuple(out)

    _patch_mgc(wrap_call)


def _module_forward(module: torch.nn.Module, graphed: Fn) -> Fn:
    training = module.training
    orig = module.forward

    def new_fwd(*a: Any, **k: Any) -> Any:
        return graphed(*a, **k) if module.training == training else orig(*a, **k)

    return new_fwd


def install_warmup_mutates_params() -> None:
    def wrap_call(orig: Fn, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        import torch
        import torch.nn as nn

        callables = args[0] if args else kwargs["callables"]
        samples = args[1] if len(args) > 1 else kwargs["sample_args"]
        one = not isinstance(callables, tuple)
        cs = (callables,) if one else tuple(callables)
        ss = (samples,) if one else tuple(samples)

        def params(c: Fn, sample: Tuple[Any, ...]) -> List[torch.nn.Parameter]:
            if isinstance(c, nn.Module):
                return list(c.parameters())
            return [t for t in sample if isinstance(t, nn.Parameter)]

        def warmup_updates(c: Fn, ps: List[torch.nn.Parameter]) -> Fn:
            def run(*a: Any, **k: Any) -> Any:
                out = c(*a, **k)
                if not torch.cuda.is_current_stream_capturing():
                    with torch.no_grad():  # an in-place update during make_graphed_callables' warmup
                        for p in ps:
                            p.add_(1e-3)
                return out

            return run

        hooks: List[torch.utils.hooks.RemovableHandle] = []
        new: List[Fn] = []
        for c, s in zip(cs, ss):
            ps = params(c, s)
            if isinstance(c, nn.Module):
                def hook(mod: torch.nn.Module, inp: Any, out: Any, ps: List[torch.nn.Parameter] = ps) -> None:
                    if not torch.cuda.is_current_stream_capturing():
                        with torch.no_grad():
                            for p in ps:
                                p.add_(1e-3)
                hooks.append(c.register_forward_hook(hook))
                new.append(c)
            else:
                new.append(warmup_updates(c, ps))
        rest = list(args[2:])
        try:
            return orig(new[0] if one else tuple(new), samples, *rest,
                        **{k: v for k, v in kwargs.items() if k not in ("callables", "sample_args")})
        finally:
            for h in hooks:
                h.remove()

    _patch_mgc(wrap_call)
