"""Framework mutants: named monkeypatches that break torch or megatron-core the way real bugs did.

`recap mutants --sut torch|megatron` runs one campaign per mutant, with the worker's environment
RECAP_FRAMEWORK_MUTANT=<name> (docs/faults.md, "Framework mutants"): a mutant is killed when recap's
oracles fail a case, so the mutants judge the oracles against the framework's own code paths, as
recap's fault points (harness/runtime/faults.h) judge them against recap's runtime.

Each mutant patches the framework's own function (torch.utils.checkpoint, torch.cuda.graphs,
torch._C._CUDAGraph.replay, megatron.core.tensor_parallel.random), never the driver's code, and is
modelled on a bug class of docs/recompute-and-rng.md (section 3). The variable is read once when
the worker starts (__main__.py); unset, this package's table is read for the hello and nothing is
imported or patched. Patches that need a feature of the framework look for it (a function, a
closure variable) and refuse to install, with one line, when it is absent: they are written for
torch 2.11 and megatron-core 0.15.3 and 0.19.2 by feature, not by version.

Modules: this one (the table and how a worker names, lists and installs a mutant), recompute
(what a mutated recompute does), torch and megatron (the patches).

`needs`: what the worker must have for the mutant to be reachable at all: "" (any device, the eager
executor on the CPU), "cuda" (a CUDA generator), "graphs" (CUDA graphs); megatron-core needs CUDA
for everything, so its mutants need "cuda".
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from .megatron import (
    install_mcore_cuda_rng_not_restored,
    install_mcore_fork_not_advancing,
    install_mcore_grad_buffer_not_zeroed,
    install_mcore_recompute,
    install_mcore_recompute_default_generator,
    install_mcore_tracker_not_restored,
    install_mcore_tracker_states_live,
    mcore_shift_then_run,
)
from .recompute import (
    fresh_generator_then_run,
    recompute_inputs_detached,
    recompute_without_param_grads,
    shift_then_run,
)
from .torch import (
    install_cpu_state_only,
    install_no_preserve,
    install_replay_rng_frozen,
    install_replay_skipped,
    install_static_input_stale,
    install_torch_recompute,
    install_warmup_mutates_params,
)

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


# ---- the table -------------------------------------------------------------------------------

MUTANTS: List[Mutant] = [
    Mutant("ckpt-no-rng-preserve", ("torch",), 3, "Megatron-LM dev #5841; PyTorch #170535", "",
           "torch.utils.checkpoint runs with preserve_rng_state=False: the recompute draws other masks",
           install_no_preserve),
    Mutant("ckpt-recompute-fresh-generator", ("torch",), 17, "Megatron-LM dev #5841", "",
           "the checkpoint's recompute reseeds the generators: it draws from a state nobody saved",
           lambda: install_torch_recompute(fresh_generator_then_run)),
    Mutant("ckpt-recompute-offset-shift", ("torch",), 16, "", "",
           "the recompute starts one draw past the restored RNG state: every recomputed mask is shifted",
           lambda: install_torch_recompute(shift_then_run)),
    Mutant("ckpt-param-grad-lost", ("torch",), 11, "Megatron-LM #6373", "",
           "a reentrant checkpoint's recompute does not reach the region's parameters: their gradients are lost",
           lambda: install_torch_recompute(recompute_without_param_grads, reentrant_only=True)),
    Mutant("ckpt-cpu-rng-only", ("torch",), 3, "torch.utils.checkpoint stashes devices of tensor arguments only", "cuda",
           "torch.utils.checkpoint restores the CPU RNG state only (set_device_states does nothing)",
           install_cpu_state_only),
    Mutant("graph-replay-skipped", ("torch", "megatron"), 8, "", "graphs",
           "torch._C._CUDAGraph.replay launches nothing every second call (the Python replay still runs)",
           install_replay_skipped),
    Mutant("graph-replay-rng-frozen", ("torch", "megatron"), 5, "Megatron-LM #5697", "graphs",
           "each graph replay puts the CUDA generators back as they were: every replay repeats its masks",
           install_replay_rng_frozen),
    Mutant("graph-static-input-stale", ("torch",), 8, "PyTorch #181723; TransformerEngine #2937", "graphs",
           "make_graphed_callables' graphed forward stops copying new inputs into its static inputs after its first call",
           install_static_input_stale),
    Mutant("graph-warmup-mutates-params", ("torch",), 21, "Megatron-LM #4433; TransformerEngine #3051", "graphs",
           "make_graphed_callables' warmup iterations update the graphed callables' parameters in place",
           install_warmup_mutates_params),
    Mutant("ckpt-input-grad-lost", ("torch",), 11, "Megatron-LM #6373", "",
           "a reentrant checkpoint's recompute runs on detached inputs: the region's input gradient is lost",
           lambda: install_torch_recompute(recompute_inputs_detached, reentrant_only=True)),
    Mutant("mcore-tracker-not-restored", ("megatron",), 17, "Megatron-LM dev #5841", "cuda",
           "CheckpointFunction.backward's tracker set_states does nothing: tracker forks in the recompute draw other masks",
           install_mcore_tracker_not_restored),
    Mutant("mcore-cuda-rng-not-restored", ("megatron",), 3, "Megatron-LM dev #5841; PyTorch #170535", "cuda",
           "CheckpointFunction.backward's _set_cuda_rng_state rewinds nothing, as a saved live handle",
           install_mcore_cuda_rng_not_restored),
    Mutant("mcore-param-grad-lost", ("megatron",), 11, "Megatron-LM #6373", "cuda",
           "CheckpointFunction's recompute runs with the region's parameters not requiring grad: weight gradients lost",
           lambda: install_mcore_recompute(recompute_without_param_grads)),
    Mutant("mcore-recompute-offset-shift", ("megatron",), 16, "", "cuda",
           "CheckpointFunction's recompute starts one draw past the restored default and tracker states",
           lambda: install_mcore_recompute(mcore_shift_then_run)),
    Mutant("mcore-tracker-states-live", ("megatron",), 3, "Megatron-LM dev #5841; PyTorch #170535", "cuda",
           "CudaRNGStatesTracker.get_states returns its live dict: the checkpoint's snapshot holds the forward's advanced states",
           install_mcore_tracker_states_live),
    Mutant("mcore-recompute-default-generator", ("megatron",), 17, "Megatron-LM dev #5841", "cuda",
           "tracker forks inside CheckpointFunction's recompute do nothing: it draws from the default generator",
           install_mcore_recompute_default_generator),
    Mutant("mcore-fork-not-advancing", ("megatron",), 5, "Megatron-LM #5697", "cuda",
           "CudaRNGStatesTracker.fork puts the named state back on exit (eagerly): every fork draws the same masks",
           install_mcore_fork_not_advancing),
    Mutant("mcore-input-grad-lost", ("megatron",), 11, "Megatron-LM #6373", "cuda",
           "CheckpointFunction's recompute runs on detached inputs: the checkpointed region's input gets no gradient",
           lambda: install_mcore_recompute(recompute_inputs_detached)),
    Mutant("mcore-grad-buffer-not-zeroed", ("megatron",), 21, "", "cuda",
           "DistributedDataParallel.zero_grad_buffer does nothing: main_grad accumulates across steps",
           install_mcore_grad_buffer_not_zeroed),
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
