"""Framework mutants: named monkeypatches that break torch or megatron-core the way real bugs did.

`recap mutants --sut torch|megatron` runs one campaign per mutant, with the worker's environment
RECAP_FRAMEWORK_MUTANT=<name> (docs/faults.md, "Framework mutants"): a mutant is killed when recap's
oracles fail a case, so the mutants judge the oracles against the framework's own code paths, as
recap's fault points (harness/runtime/faults.h) judge them against recap's runtime.

Each mutant patches the framework's own function (torch.utils.checkpoint, torch.cuda.graphs,
torch._C._CUDAGraph.replay, megatron.core.tensor_parallel.random), never the driver's code, and is
modelled on a bug class of docs/recompute-and-rng.md (section 3). The variable is read once when
the worker starts (__main__.py); unset, this module's table is read for the hello and nothing is
imported or patched. Patches that need a feature of the framework look for it (a function, a
closure variable) and refuse to install, with one line, when it is absent: they are written for
torch 2.11 and megatron-core 0.15.3 and 0.19.2 by feature, not by version.

`needs`: what the worker must have for the mutant to be reachable at all: "" (any device, the eager
executor on the CPU), "cuda" (a CUDA generator), "graphs" (CUDA graphs); megatron-core needs CUDA
for everything, so its mutants need "cuda".
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
import contextlib
from typing import Callable, Dict, List, Optional, Tuple

ENV = "RECAP_FRAMEWORK_MUTANT"


@dataclass(frozen=True)
class Mutant:
    name: str
    suts: Tuple[str, ...]  # the SUTs it applies to: "torch", "megatron" (graph mutants act on both)
    bug_class: int    # docs/recompute-and-rng.md, section 3
    upstream: str     # the public issue or PR it is modelled on ("" none)
    needs: str        # "", "cuda" or "graphs"
    description: str  # one line
    install: Callable[[], None]

    @property
    def cpu(self) -> bool:
        return self.needs == ""


# ---- shared pieces ---------------------------------------------------------------------------


def _on_recompute(fn, hook):
    """fn as a checkpoint sees it: the first call is the forward, later ones are recomputes, which
    go through hook(fn, args, kwargs) instead. A checkpoint makes one wrapper per forward."""
    calls = [0]

    def run(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 1:
            return fn(*args, **kwargs)
        return hook(fn, args, kwargs)

    return run


def _params_of(fn) -> list:
    """The parameters a checkpointed function computes with: a module's, or those of the modules
    its closure or bound self holds (megatron's `custom(hidden_states)` closures)."""
    import torch.nn as nn

    holders = [fn, getattr(fn, "__self__", None)]
    holders += [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _cell_set(c)]
    out, seen = [], set()
    for h in holders:
        if isinstance(h, nn.Module):
            for p in h.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
    return out


def _cell_set(c) -> bool:
    try:
        c.cell_contents
        return True
    except ValueError:
        return False


def _recompute_without_param_grads(fn, args, kwargs):
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


def _recompute_inputs_detached(fn, args, kwargs):
    # The recompute runs on copies of its inputs cut from the graph the checkpoint's backward reads
    # their .grad from: the region's input gets no gradient, so everything before it loses its own.
    import torch

    return fn(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)


def _devices_of(args) -> list:
    import torch

    devs = {a.device for a in args if isinstance(a, torch.Tensor)}
    return sorted(devs, key=str) or [torch.device("cpu")]


def _shift_then_run(fn, args, kwargs):
    # One extra draw before the recompute: every mask it draws comes from the next Philox block
    # (CUDA) or the next values (CPU) of the state the checkpoint restored.
    import torch

    for d in _devices_of(args):
        torch.rand(1, device=d)
    return fn(*args, **kwargs)


def _fresh_generator_then_run(fn, args, kwargs):
    # The recompute draws from a generator seeded afresh, not from the state saved at forward.
    import torch

    torch.manual_seed(torch.initial_seed())
    return fn(*args, **kwargs)


# ---- torch.utils.checkpoint ------------------------------------------------------------------


def _patch_torch_checkpoint(transform):
    """torch.utils.checkpoint.checkpoint(function, *args, **kw) -> transform(function, kw) first.
    Callers look it up on the module at call time (the drivers' layers.py does)."""
    import torch.utils.checkpoint as cp

    orig = cp.checkpoint

    def checkpoint(function, *args, **kwargs):
        function = transform(function, kwargs)
        return orig(function, *args, **kwargs)

    checkpoint.__wrapped__ = orig
    checkpoint.recap_mutant = True
    cp.checkpoint = checkpoint


def _install_no_preserve():
    def t(function, kwargs):
        kwargs["preserve_rng_state"] = False
        return function

    _patch_torch_checkpoint(t)


def _install_torch_recompute(hook, reentrant_only=False):
    def t(function, kwargs):
        if reentrant_only and kwargs.get("use_reentrant") is False:
            return function
        return _on_recompute(function, hook)

    _patch_torch_checkpoint(t)


def _install_cpu_state_only():
    import torch.utils.checkpoint as cp

    if not hasattr(cp, "set_device_states"):
        raise RuntimeError("torch.utils.checkpoint has no set_device_states")

    def set_device_states(devices, states, *, device_type=None):
        return None  # the device generators keep whatever state the backward left them in

    set_device_states.recap_mutant = True
    cp.set_device_states = set_device_states


# ---- torch CUDA graphs -----------------------------------------------------------------------


def _patch_cuda_graph_replay(make):
    """torch._C._CUDAGraph.replay, the C++ method below torch.cuda.CUDAGraph.replay (which the
    driver's observer wraps to count replays: it still sees every call)."""
    import torch

    base = torch._C._CUDAGraph
    orig = base.replay
    base.replay = make(orig)


def _install_replay_skipped():
    calls = [0]

    def make(orig):
        def replay(self):
            calls[0] += 1
            if calls[0] % 2 == 0:
                return None  # every second replay launches nothing: its outputs are the last replay's
            return orig(self)

        return replay

    _patch_cuda_graph_replay(make)


def _install_replay_rng_frozen():
    import torch

    def make(orig):
        def replay(self):
            gens = list(torch.cuda.default_generators)
            saved = [g.get_state() for g in gens]
            orig(self)
            for g, s in zip(gens, saved):
                g.set_state(s)  # the prologue's advance is undone: the next replay draws the same

        return replay

    _patch_cuda_graph_replay(make)


def _mgc_module():
    import torch.cuda.graphs as graphs

    if not hasattr(graphs, "make_graphed_callables"):
        raise RuntimeError("torch.cuda.graphs has no make_graphed_callables")
    return graphs


def _patch_mgc(wrap_call):
    """torch.cuda.make_graphed_callables (both names torch exports) -> wrap_call(orig, args, kw)."""
    import torch

    graphs = _mgc_module()
    orig = graphs.make_graphed_callables

    def make_graphed_callables(*args, **kwargs):
        return wrap_call(orig, args, kwargs)

    make_graphed_callables.__wrapped__ = orig
    graphs.make_graphed_callables = make_graphed_callables
    torch.cuda.make_graphed_callables = make_graphed_callables


def _freevars(fn) -> Dict[str, object]:
    code = getattr(fn, "__code__", None)
    if code is None or not fn.__closure__:
        return {}
    return dict(zip(code.co_freevars, fn.__closure__))


def _install_static_input_stale():
    graphs = _mgc_module()
    inner = [c for c in graphs.make_graphed_callables.__code__.co_consts
             if getattr(c, "co_name", "") == "make_graphed_autograd_function"]
    if not inner or "len_user_args" not in inner[0].co_cellvars:
        raise RuntimeError("torch.cuda.make_graphed_callables copies static inputs in a way this mutant "
                           "does not know (no len_user_args)")

    def len_cell(graphed_fn):
        graphed_cls = _freevars(graphed_fn).get("Graphed")
        fwd = getattr(graphed_cls.cell_contents, "forward", None) if graphed_cls else None
        return _freevars(fwd).get("len_user_args") if fwd else None

    def stale_after_first(graphed_fn):
        cell = len_cell(graphed_fn)
        if cell is None:
            raise RuntimeError("graphed callable without a len_user_args closure")
        calls = [0]

        def run(*a, **k):
            calls[0] += 1
            out = graphed_fn(*a, **k)
            if calls[0] == 1:
                cell.cell_contents = 0  # Graphed.forward copies no user input into its static inputs
            return out

        return run

    def wrap_call(orig, args, kwargs):
        import torch.nn as nn

        ret = orig(*args, **kwargs)
        one = not isinstance(ret, tuple)
        out = []
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


def _module_forward(module, graphed):
    training = module.training
    orig = module.forward

    def new_fwd(*a, **k):
        return graphed(*a, **k) if module.training == training else orig(*a, **k)

    return new_fwd


def _install_warmup_mutates_params():
    def wrap_call(orig, args, kwargs):
        import torch
        import torch.nn as nn

        callables = args[0] if args else kwargs["callables"]
        samples = args[1] if len(args) > 1 else kwargs["sample_args"]
        one = not isinstance(callables, tuple)
        cs = (callables,) if one else tuple(callables)
        ss = (samples,) if one else tuple(samples)

        def params(c, sample):
            if isinstance(c, nn.Module):
                return list(c.parameters())
            return [t for t in sample if isinstance(t, nn.Parameter)]

        def warmup_updates(c, ps):
            def run(*a, **k):
                out = c(*a, **k)
                if not torch.cuda.is_current_stream_capturing():
                    with torch.no_grad():  # an in-place update during make_graphed_callables' warmup
                        for p in ps:
                            p.add_(1e-3)
                return out

            return run

        hooks, new = [], []
        for c, s in zip(cs, ss):
            ps = params(c, s)
            if isinstance(c, nn.Module):
                def hook(mod, inp, out, ps=ps):
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


# ---- megatron-core tensor_parallel.random ----------------------------------------------------


def _mcore_random():
    from megatron.core.tensor_parallel import random as r

    if not hasattr(r, "CheckpointFunction"):
        raise RuntimeError("megatron.core.tensor_parallel.random has no CheckpointFunction")
    return r


def _in_random_py(f, name: str) -> bool:
    return f is not None and f.f_code.co_name == name and f.f_code.co_filename.replace("\\", "/").endswith(
        "megatron/core/tensor_parallel/random.py")


def _called_from_checkpoint_backward() -> bool:
    """The restore before CheckpointFunction's recompute: called by its backward directly (0.15.3
    restores each state there), or through _set_all_rng_states called by it (later versions). Not
    _fork_rng's restore on the way out, nor a tracker fork."""
    f = sys._getframe(2)  # 0: here, 1: the patched function, 2: its caller
    if _in_random_py(f, "_set_all_rng_states"):
        f = f.f_back
    return _in_random_py(f, "backward")


def _install_mcore_recompute(hook):
    r = _mcore_random()
    cf = r.CheckpointFunction
    orig = cf.forward  # a staticmethod: (ctx, run_function, distribute_saved_activations, *args)

    def forward(ctx, run_function, *rest):
        return orig(ctx, _on_recompute(run_function, hook), *rest)

    cf.forward = staticmethod(forward)


def _install_mcore_tracker_not_restored():
    r = _mcore_random()
    # the class, not get_cuda_rng_tracker(): that call would initialize the tracker with default
    # arguments before the driver does (and later initializations are ignored: class 23)
    classes = [r.CudaRNGStatesTracker]
    for cls in classes:
        if "set_states" not in cls.__dict__:
            raise RuntimeError(f"{cls.__name__} has no set_states")
        orig = cls.__dict__["set_states"]

        def set_states(self, states, _orig=orig):
            if _called_from_checkpoint_backward():
                return None  # the recompute forks tracker states nobody restored
            return _orig(self, states)

        cls.set_states = set_states


def _install_mcore_cuda_rng_not_restored():
    r = _mcore_random()
    names = set(r.CheckpointFunction.backward.__code__.co_names)
    if not hasattr(r, "_set_cuda_rng_state") or not names & {"_set_cuda_rng_state", "_set_all_rng_states"}:
        raise RuntimeError("CheckpointFunction.backward does not restore through _set_cuda_rng_state")
    orig = r._set_cuda_rng_state

    def _set_cuda_rng_state(*args, **kwargs):
        if _called_from_checkpoint_backward():
            return None  # as a saved live handle restores: nothing rewinds
        return orig(*args, **kwargs)

    r._set_cuda_rng_state = _set_cuda_rng_state


def _mcore_shift_then_run(fn, args, kwargs):
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


def _tracker_class():
    r = _mcore_random()
    cls = getattr(r, "CudaRNGStatesTracker", None)
    if cls is None:
        raise RuntimeError("megatron.core.tensor_parallel.random has no CudaRNGStatesTracker")
    return r, cls


def _own(cls, name: str):
    if name not in cls.__dict__:
        raise RuntimeError(f"{cls.__name__} has no {name}")
    return cls.__dict__[name]


def _install_mcore_tracker_states_live():
    _, cls = _tracker_class()
    _own(cls, "get_states")
    if "states_" not in getattr(_own(cls, "set_states"), "__code__", compile("", "", "exec")).co_names:
        raise RuntimeError("CudaRNGStatesTracker keeps its states elsewhere than states_")

    def get_states(self):
        return self.states_  # the live dict: the forward's fork exit writes its advance into the snapshot

    get_states.recap_mutant = True
    cls.get_states = get_states


def _fork_name_default(fork) -> str:
    import inspect

    p = inspect.signature(fork).parameters.get("name")
    if p is None or p.default is inspect.Parameter.empty:
        raise RuntimeError("CudaRNGStatesTracker.fork takes no name with a default")
    return p.default


def _install_mcore_fork_not_advancing():
    import torch

    _, cls = _tracker_class()
    orig = _own(cls, "fork")
    default = _fork_name_default(orig)

    def snap(st):
        if isinstance(st, torch.Tensor):
            return ("tensor", st)  # a host-mode state is a fresh tensor per fork: keep the old one
        if isinstance(st, torch.Generator) and not torch.cuda.is_current_stream_capturing():
            return ("generator", st.get_state())  # a graph-safe state advances in place: by value
        return None

    @contextlib.contextmanager
    def fork(self, name=default):
        saved = snap(self.states_.get(name))
        with orig(self, name):
            yield
        if saved is None:
            return
        if saved[0] == "tensor":
            self.states_[name] = saved[1]  # the named state is put back: the next fork draws the same
        else:
            self.states_[name].set_state(saved[1])

    fork.recap_mutant = True
    cls.fork = fork


def _install_mcore_recompute_default_generator():
    _, cls = _tracker_class()
    orig = _own(cls, "fork")
    default = _fork_name_default(orig)
    in_recompute = [0]

    def fork(self, name=default):
        if in_recompute[0]:
            return contextlib.nullcontext()  # the recompute draws from the default generator
        return orig(self, name)

    fork.recap_mutant = True
    cls.fork = fork

    def hook(fn, args, kwargs):
        in_recompute[0] += 1
        try:
            return fn(*args, **kwargs)
        finally:
            in_recompute[0] -= 1

    _install_mcore_recompute(hook)


def _install_mcore_grad_buffer_not_zeroed():
    try:
        from megatron.core.distributed import distributed_data_parallel as d
    except ImportError as e:
        raise RuntimeError(f"megatron.core.distributed.distributed_data_parallel: {e}".splitlines()[0])
    cls = getattr(d, "DistributedDataParallel", None)
    if cls is None:
        raise RuntimeError("megatron.core.distributed has no DistributedDataParallel")
    _own(cls, "zero_grad_buffer")

    def zero_grad_buffer(self, *args, **kwargs):
        return None  # main_grad keeps the last step's gradients: the next step accumulates onto them

    zero_grad_buffer.recap_mutant = True
    cls.zero_grad_buffer = zero_grad_buffer


# ---- the table -------------------------------------------------------------------------------

MUTANTS: List[Mutant] = [
    Mutant("ckpt-no-rng-preserve", ("torch",), 3, "Megatron-LM dev #5841; PyTorch #170535", "",
           "torch.utils.checkpoint runs with preserve_rng_state=False: the recompute draws other masks",
           _install_no_preserve),
    Mutant("ckpt-recompute-fresh-generator", ("torch",), 17, "Megatron-LM dev #5841", "",
           "the checkpoint's recompute reseeds the generators: it draws from a state nobody saved",
           lambda: _install_torch_recompute(_fresh_generator_then_run)),
    Mutant("ckpt-recompute-offset-shift", ("torch",), 16, "", "",
           "the recompute starts one draw past the restored RNG state: every recomputed mask is shifted",
           lambda: _install_torch_recompute(_shift_then_run)),
    Mutant("ckpt-param-grad-lost", ("torch",), 11, "Megatron-LM #6373", "",
           "a reentrant checkpoint's recompute does not reach the region's parameters: their gradients are lost",
           lambda: _install_torch_recompute(_recompute_without_param_grads, reentrant_only=True)),
    Mutant("ckpt-cpu-rng-only", ("torch",), 3, "torch.utils.checkpoint stashes devices of tensor arguments only", "cuda",
           "torch.utils.checkpoint restores the CPU RNG state only (set_device_states does nothing)",
           _install_cpu_state_only),
    Mutant("graph-replay-skipped", ("torch", "megatron"), 8, "", "graphs",
           "torch._C._CUDAGraph.replay launches nothing every second call (the Python replay still runs)",
           _install_replay_skipped),
    Mutant("graph-replay-rng-frozen", ("torch", "megatron"), 5, "Megatron-LM #5697", "graphs",
           "each graph replay puts the CUDA generators back as they were: every replay repeats its masks",
           _install_replay_rng_frozen),
    Mutant("graph-static-input-stale", ("torch",), 8, "PyTorch #181723; TransformerEngine #2937", "graphs",
           "make_graphed_callables' graphed forward stops copying new inputs into its static inputs after its first call",
           _install_static_input_stale),
    Mutant("graph-warmup-mutates-params", ("torch",), 21, "Megatron-LM #4433; TransformerEngine #3051", "graphs",
           "make_graphed_callables' warmup iterations update the graphed callables' parameters in place",
           _install_warmup_mutates_params),
    Mutant("ckpt-input-grad-lost", ("torch",), 11, "Megatron-LM #6373", "",
           "a reentrant checkpoint's recompute runs on detached inputs: the region's input gradient is lost",
           lambda: _install_torch_recompute(_recompute_inputs_detached, reentrant_only=True)),
    Mutant("mcore-tracker-not-restored", ("megatron",), 17, "Megatron-LM dev #5841", "cuda",
           "CheckpointFunction.backward's tracker set_states does nothing: tracker forks in the recompute draw other masks",
           _install_mcore_tracker_not_restored),
    Mutant("mcore-cuda-rng-not-restored", ("megatron",), 3, "Megatron-LM dev #5841; PyTorch #170535", "cuda",
           "CheckpointFunction.backward's _set_cuda_rng_state rewinds nothing, as a saved live handle",
           _install_mcore_cuda_rng_not_restored),
    Mutant("mcore-param-grad-lost", ("megatron",), 11, "Megatron-LM #6373", "cuda",
           "CheckpointFunction's recompute runs with the region's parameters not requiring grad: weight gradients lost",
           lambda: _install_mcore_recompute(_recompute_without_param_grads)),
    Mutant("mcore-recompute-offset-shift", ("megatron",), 16, "", "cuda",
           "CheckpointFunction's recompute starts one draw past the restored default and tracker states",
           lambda: _install_mcore_recompute(_mcore_shift_then_run)),
    Mutant("mcore-tracker-states-live", ("megatron",), 3, "Megatron-LM dev #5841; PyTorch #170535", "cuda",
           "CudaRNGStatesTracker.get_states returns its live dict: the checkpoint's snapshot holds the forward's advanced states",
           _install_mcore_tracker_states_live),
    Mutant("mcore-recompute-default-generator", ("megatron",), 17, "Megatron-LM dev #5841", "cuda",
           "tracker forks inside CheckpointFunction's recompute do nothing: it draws from the default generator",
           _install_mcore_recompute_default_generator),
    Mutant("mcore-fork-not-advancing", ("megatron",), 5, "Megatron-LM #5697", "cuda",
           "CudaRNGStatesTracker.fork puts the named state back on exit (eagerly): every fork draws the same masks",
           _install_mcore_fork_not_advancing),
    Mutant("mcore-input-grad-lost", ("megatron",), 11, "Megatron-LM #6373", "cuda",
           "CheckpointFunction's recompute runs on detached inputs: the checkpointed region's input gets no gradient",
           lambda: _install_mcore_recompute(_recompute_inputs_detached)),
    Mutant("mcore-grad-buffer-not-zeroed", ("megatron",), 21, "", "cuda",
           "DistributedDataParallel.zero_grad_buffer does nothing: main_grad accumulates across steps",
           _install_mcore_grad_buffer_not_zeroed),
]

BY_NAME: Dict[str, Mutant] = {m.name: m for m in MUTANTS}


def for_sut(sut: str) -> List[Mutant]:
    return [m for m in MUTANTS if sut in m.suts]


def requested(sut: str, environ=None) -> "tuple[Optional[Mutant], str]":
    """(the mutant RECAP_FRAMEWORK_MUTANT names, "") or (None, "") when unset, or (None, one line)."""
    name = (os.environ if environ is None else environ).get(ENV, "")
    if not name:
        return None, ""
    m = BY_NAME.get(name)
    if m is None or sut not in m.suts:
        known = ", ".join(x.name for x in for_sut(sut))
        return None, f"{ENV}={name}: not a mutant of {sut} (known: {known})"
    return m, ""


def not_reachable(m: Mutant, caps: dict, device: str) -> str:
    """"" when the worker can fire m, else why not (one line)."""
    if m.needs == "graphs" and not caps.get("graphs", False):
        return f"needs CUDA graphs; this worker runs on {device} (the eager executor only)"
    if m.needs == "cuda" and device == "cpu":
        return "needs a CUDA device; this worker runs on cpu"
    return ""


def listing(sut: str, caps: dict, device: str) -> List[dict]:
    """The hello's "mutants": every mutant of this SUT, and whether this worker can fire it."""
    return [{"name": m.name, "bug_class": m.bug_class, "upstream": m.upstream, "cpu": m.cpu,
             "description": m.description, "not_exercised": not_reachable(m, caps, device)}
            for m in for_sut(sut)]


def install(m: Mutant) -> None:
    """Applies m's patch (once, before the first case); RuntimeError with one line when the
    framework lacks what it patches."""
    m.install()
    print(f"recap_drivers: framework mutant {m.name} installed ({m.description})", file=sys.stderr, flush=True)
