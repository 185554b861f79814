"""How torch graphs a case.

  per-layer       steps 0 .. W-1 are real eager training steps on a side stream (phase "warmup");
                  then torch.cuda.make_graphed_callables(num_warmup_iters=W) makes a forward and a
                  backward graph per graphed layer and microbatch (the CUDA RNG state is saved
                  before and restored after, so its own warmup iterations do not shift the replays'
                  draws); steps W .. run the graphed callables (fresh inputs copied into their
                  static inputs by the graphed function), ungraphed layers eagerly between them.
                  torch's make_graphed_callables has no `_order`/num_microbatches (those are
                  TransformerEngine's): each call captures the forwards of its callables in tuple
                  order, then their backwards in reverse. With shared_pool one call per microbatch
                  shares one graph_pool_handle() (capture order = live order only for the order
                  [1, -1] per microbatch: other orders are skipped); without it, one call per
                  (layer, microbatch), each with its own pool, for any order.
  full-iteration  steps 0 .. W-1 eagerly on a side stream (phase "warmup"), then one
                  torch.cuda.graph capture of a whole training step (zero grads, forwards, losses,
                  backwards, grad copies, SGD), replayed once per later step with fresh data copied
                  into its static input/target buffers.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from ...core.cuda_errors import root_exception
from ...core.runner import Runner
from .graphs import locate_in_make_graphed_callables, mgc_label


class TorchRunner(Runner):
    def __init__(self, sut: Any, c: Any, data: Any):
        super().__init__(sut, c, data)
        self.graphed_fns: Dict[Tuple[int, int], Any] = {}
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.graph_fwd_bytes: Dict[Tuple[int, int], int] = {}
        self.mgc_layers: List[int] = []  # the layers of the make_graphed_callables call in progress

    def graph_resolvers(self) -> List[Callable[[Any], str]]:
        return [mgc_label]

    def layer_figures(self) -> List[Dict[str, Any]]:
        """Per-layer graphs: the bytes each layer's captured forward keeps for its backward (the
        largest over microbatches), as activations_in_graphs sums them (PROTOCOL.md section 7)."""
        if not self.graph_fwd_bytes:
            return []
        out = []
        for l in range(len(self.case.layers)):
            kept = [v for (layer, _), v in self.graph_fwd_bytes.items() if layer == l]
            out.append({"layer": l, "activations_in_graphs": max(kept) if kept else None})
        return out

    def call_replay(self, l: int, m: int, x: torch.Tensor) -> torch.Tensor:
        fn = self.graphed_fns.get((l, m))
        if fn is None:
            return self.model.layers[l](x)
        return fn(x, *self.model.layer_params(l))

    def replay_losses(self) -> List[Any]:
        if self.graph is not None:
            self.graph.replay()
            return list(self.static_losses or [])
        return super().replay_losses()

    # -- per-layer: make_graphed_callables --

    def graphed_layers(self) -> List[int]:
        """The layers this run graphs: every graphed layer of the case (a pipeline stage: its own)."""
        return [i for i, l in enumerate(self.case.layers) if l.graphed]

    def run_per_layer(self) -> None:
        if not self.warmup():
            return
        graphed = self.graphed_layers()
        if graphed:
            if not self._build_per_layer(graphed):
                return
        self.replays()

    def _graph_fn(self, l: int) -> Callable[..., torch.Tensor]:
        layer = self.model.layers[l]

        def fn(x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
            # params: the layer's parameters, the graph's static input surface
            if not torch.cuda.is_current_stream_capturing():
                return layer(x)
            a0 = self.obs.allocated()
            y = layer(x)
            self.graph_fwd_bytes[(l, self.obs.microbatch)] = max(0, self.obs.allocated() - a0)
            return y

        fn.recap_path = self.layer_names[l]  # type: ignore[attr-defined]
        return fn

    def _sample(self, l: int) -> Tuple[torch.Tensor, ...]:
        c = self.case
        x = torch.zeros((c.tokens, c.hidden), dtype=self.dt, device=self.dev, requires_grad=True)
        return (x,) + tuple(self.model.layer_params(l))

    def _where(self, e: BaseException) -> Optional[Dict[str, str]]:
        """Where in make_graphed_callables e happened: phase, pass and the layer of the callable."""
        mgc = locate_in_make_graphed_callables(root_exception(e).__traceback__) or \
            locate_in_make_graphed_callables(e.__traceback__)
        if mgc is None:
            return None
        i = mgc["index"]
        layer = self.layer_names[self.mgc_layers[i]] if 0 <= i < len(self.mgc_layers) else ""
        return {"phase": mgc["phase"], "pass": mgc["pass"], "layer": layer}

    def _build_per_layer(self, graphed: List[int]) -> bool:
        c = self.case
        mgc = torch.cuda.make_graphed_callables
        sig = inspect.signature(mgc).parameters
        kw: Dict[str, Any] = {"num_warmup_iters": c.warmup}
        self.begin_build(c.warmup)
        cuda_rng = torch.cuda.get_rng_state()
        cpu_rng = torch.get_rng_state()
        try:
            if c.shared_pool:
                pool = torch.cuda.graph_pool_handle()
                if "pool" in sig:
                    kw["pool"] = pool
                for m in range(c.microbatches):
                    self.obs.microbatch = m
                    self.pos.set(microbatch=m)
                    self.mgc_layers = list(graphed)
                    fns = tuple(self._graph_fn(l) for l in graphed)
                    samples = tuple(self._sample(l) for l in graphed)
                    outs = mgc(fns, samples, **kw)
                    for l, g in zip(graphed, outs):
                        self.graphed_fns[(l, m)] = g
            else:
                for m in range(c.microbatches):
                    for l in graphed:
                        self.obs.microbatch = m
                        self.pos.set(microbatch=m, layer=self.layer_names[l])
                        self.mgc_layers = [l]
                        self.graphed_fns[(l, m)] = mgc(self._graph_fn(l), self._sample(l), **kw)
        except Exception as e:
            self.fail(e, "capture", self._where(e))
            return False
        finally:
            try:
                torch.cuda.set_rng_state(cuda_rng)
                torch.set_rng_state(cpu_rng)
            except Exception:
                pass
        # bytes the forward graphs hold for their backward graphs: with one shared pool the
        # microbatches' captures reuse each other's memory (max), with a pool per graph they add up
        per_mb = [sum(v for (l, m), v in self.graph_fwd_bytes.items() if m == mb) for mb in range(c.microbatches)]
        self.end_build(max(per_mb) if c.shared_pool else sum(per_mb))
        return True

    # -- full-iteration: torch.cuda.graph around a whole step --

    def run_full_iteration(self) -> None:
        if not self.warmup():
            return
        self.begin_build(self.case.warmup)
        g = torch.cuda.CUDAGraph()
        self.graphs.label = "iteration"
        try:
            with torch.cuda.graph(g):
                self.static_losses = self.body(self.call_eager)
        except Exception as e:
            self.fail(e, "capture")
            return
        finally:
            self.graphs.label = ""
        self.graph = g
        self.end_build(self.body_activations)
        self.replays()
