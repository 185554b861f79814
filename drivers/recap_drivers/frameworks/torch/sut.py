"""The PyTorch SUT: what torch runs (capabilities) and, for what it cannot, why (the skip policy:
one line naming the dimension). Its runner is runner.TorchRunner."""

from __future__ import annotations

from typing import Any, Dict

import torch

from ... import case as case_mod
from ...core.records import RunData
from ...core.replies import FAULT
from ...core.sut import SUT, default_order
from .runner import TorchRunner

ALL_KINDS = list(case_mod.LAYER_KINDS)


class TorchSUT(SUT):
    name = "torch"

    def capabilities(self) -> Dict[str, Any]:
        return {
            "kinds": list(ALL_KINDS),
            "dtype": ["fp32", "bf16"],
            # (the planted fault no-graphs claims graphed executors on a CPU worker)
            "executor": ["eager"] + (["per-layer", "full-iteration"] if self.graphs or FAULT == "no-graphs" else []),
            "checkpoint": ["none", "full", "selective"],
            "checkpoint_style": ["reentrant", "non-reentrant"],
            "policy": ["naive"],
            "generator": ["graph-safe"],
            "device_state": [self.device_state],
            "warmup_backward": ["backward", "grad-of-inputs"],
            "shared_pool": [True, False],
            "graphs": self.graphs,
            # make_graphed_callables warms up and captures backwards with torch.autograd.grad, and a
            # shared pool follows only the order [1, -1] per microbatch (PROTOCOL.md, section 5)
            "per_layer": {"warmup_backward": ["grad-of-inputs"], "shared_pool_orders": ["default"]},
        }

    def why_skipped(self, c: case_mod.Case) -> str:
        """"" when the case runs here, else one line: the dimension and why torch cannot run it.
        A dimension that has no effect on the case (recap ignores it too) is not a reason."""
        if c.faults:
            return f"faults {', '.join(c.faults)}: fault points are recap's own runtime's (docs/faults.md)"
        if c.executor not in self.capabilities()["executor"]:
            return (f"executor {c.executor}: needs CUDA graphs, this worker runs on {self.device_name()} "
                    f"(torch.cuda.is_available() is {torch.cuda.is_available()})")
        if c.any_checkpoint():
            if c.checkpoint_style == "without-output":
                return ("checkpoint_style without-output: torch has no CheckpointWithoutOutput (Megatron-LM's "
                        "tensor_parallel.random); torch.utils.checkpoint is reentrant or non-reentrant")
            if c.policy == "skip":
                return ("policy skip: torch.utils.checkpoint has no graph-phase switch that bypasses recompute "
                        "(Megatron-LM PR #3919); torch's checkpoint is the naive policy")
            if c.policy == "graph-safe":
                return ("policy graph-safe: torch.utils.checkpoint saves and restores RNG state with "
                        "get_rng_state/set_rng_state, it has no device (seed, offset) pair read at recompute "
                        "(TransformerEngine); torch's checkpoint is the naive policy")
        draws = c.any_dropout()
        per_layer_graphs = c.executor == "per-layer" and any(l.graphed for l in c.layers)
        graphs_used = c.executor == "full-iteration" or per_layer_graphs
        # the generator decides how a checkpoint saves RNG state (recap: a host generator's
        # get_rng_state synchronizes) even without dropout, and how graphs draw
        if (c.any_checkpoint() or (draws and graphs_used)) and c.generator != "graph-safe":
            return ("generator host: torch's CUDA generator is graph-safe (under capture its draws read a "
                    "device seed/offset and replays refresh it); a generator baking values into graphs is not torch's")
        if draws and graphs_used and c.device_state != self.device_state:
            return (f"device_state {c.device_state}: torch {torch.__version__} keeps its graph RNG state "
                    f"{self.device_state}")
        if per_layer_graphs:
            if c.warmup_backward == "backward":
                return ("warmup_backward backward: torch.cuda.make_graphed_callables warms up and captures every "
                        "backward graph with torch.autograd.grad (grad-of-inputs), never .backward()")
            if c.shared_pool and c.microbatches > 1 and c.order() != default_order(c):
                return ("microbatch_order with shared_pool: torch.cuda.make_graphed_callables has no _order "
                        "(TransformerEngine's); one shared pool captured forwards-then-backwards per call "
                        f"cannot follow the order {c.order()}")
        return ""

    def make_runner(self, c: case_mod.Case, data: RunData) -> TorchRunner:
        return TorchRunner(self, c, data)
