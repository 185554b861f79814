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

Modules: this one (how a worker names, lists and installs a mutant; the table is table.json), recompute
(what a mutated recompute does), torch, distributed (torch.distributed's collectives) and megatron
(the patches).

`needs`: what the worker must have for the mutant to be reachable at all: "" (any device, the eager
executor on the CPU), "cuda" (a CUDA generator), "graphs" (CUDA graphs), "ranks" (a rank group, whose
hello lists capabilities.tp: recap mutants --ranks N); megatron-core needs CUDA for everything, so
its mutants need "cuda" (and its rank groups' "ranks" mutants a GPU too: `cpu` is false for them).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from .distributed import install_all_gather_reversed, install_all_reduce_skipped
from .megatron import (
    install_mcore_cuda_rng_not_restored,
    install_mcore_dp_grads_not_reduced,
    install_mcore_fork_not_advancing,
    install_mcore_grad_buffer_not_zeroed,
    install_mcore_recompute,
    install_mcore_recompute_default_generator,
    install_mcore_tp_seed_shared,
    install_mcore_tracker_not_restored,
    install_mcore_tracker_states_live,
    mcore_shift_then_run,
)
from .recompute import (
    Hook,
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
    needs: str        # "", "cuda", "graphs" or "ranks"
    description: str  # one line
    install: Callable[[], None]

    @property
    def cpu(self) -> bool:
        # a torch rank group runs on the CPU with gloo; megatron-core needs CUDA for everything
        return self.needs in ("", "ranks") and self.suts != ("megatron",)


# ---- the table -------------------------------------------------------------------------------
# table.json, one row a mutant: its fields, and how it installs: "install" names a function below,
# called with no argument or, given "hook", with that recompute hook (and "reentrant_only").

_INSTALLS: Dict[str, Callable[..., None]] = {f.__name__: f for f in (
    install_no_preserve, install_torch_recompute, install_cpu_state_only, install_replay_skipped,
    install_replay_rng_frozen, install_static_input_stale, install_warmup_mutates_params,
    install_mcore_tracker_not_restored, install_mcore_cuda_rng_not_restored, install_mcore_recompute,
    install_mcore_tracker_states_live, install_mcore_recompute_default_generator, install_mcore_fork_not_advancing,
    install_mcore_grad_buffer_not_zeroed, install_all_reduce_skipped, install_all_gather_reversed,
    install_mcore_tp_seed_shared, install_mcore_dp_grads_not_reduced)}
_HOOKS: Dict[str, Hook] = {f.__name__: f for f in (
    fresh_generator_then_run, shift_then_run, recompute_without_param_grads, recompute_inputs_detached,
    mcore_shift_then_run)}


def _mutant(row: Dict[str, Any]) -> Mutant:
    install = _INSTALLS[row["install"]]
    if "hook" in row:
        opts = {"reentrant_only": True} if row.get("reentrant_only") else {}
        install = functools.partial(install, _HOOKS[row["hook"]], **opts)
    return Mutant(row["name"], tuple(row["suts"]), row["bug_class"], row["upstream"], row["needs"],
                  row["description"], install)


with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "table.json")) as _f:
    MUTANTS: List[Mutant] = [_mutant(row) for row in json.load(_f)]

BY_NAME: Dict[str, Mutant] = {m.name: m for m in MUTANTS}


def for_sut(sut: str) -> List[Mutant]:
    return [m for m in MUTANTS if sut in m.suts]


def requested(sut: str, environ: Optional[Mapping[str, str]] = None) -> Tuple[Optional[Mutant], str]:
    """(the mutant RECAP_FRAMEWORK_MUTANT names, "") or (None, "") when unset, or (None, one line)."""
    name = (os.environ if environ is None else environ).get(ENV, "")
    if not name:
        return None, ""
    m = BY_NAME.get(name)
    if m is None or sut not in m.suts:
        known = ", ".join(x.name for x in for_sut(sut))
        return None, f"{ENV}={name}: not a mutant of {sut} (known: {known})"
    return m, ""


def not_reachable(m: Mutant, caps: Dict[str, Any], device: str) -> str:
    """"" when the worker can fire m, else why not (one line)."""
    if m.needs == "graphs" and not caps.get("graphs", False):
        return f"needs CUDA graphs; this worker runs on {device} (the eager executor only)"
    if m.needs == "cuda" and device == "cpu":
        return "needs a CUDA device; this worker runs on cpu"
    if m.needs == "ranks" and not caps.get("tp"):
        return "needs a rank group (--ranks N): this worker runs one rank and calls no collective"
    return ""


def listing(sut: str, caps: Dict[str, Any], device: str) -> List[Dict[str, Any]]:
    """The hello's "mutants": every mutant of this SUT, and whether this worker can fire it."""
    return [{"name": m.name, "bug_class": m.bug_class, "upstream": m.upstream, "cpu": m.cpu,
             "description": m.description, "not_exercised": not_reachable(m, caps, device)}
            for m in for_sut(sut)]


def install(m: Mutant) -> None:
    """Applies m's patch (once, before the first case); RuntimeError with one line when the
    framework lacks what it patches."""
    m.install()
    print(f"recap_drivers: framework mutant {m.name} installed ({m.description})", file=sys.stderr, flush=True)
