"""One execution of a case through megatron-core: the steps run by get_forward_backward_func()
over Megatron's DistributedDataParallel (one rank), per-layer graphs made by CudaGraphManager at
the end of step 0, full-iteration graphs by FullCudaGraphWrapper."""

from __future__ import annotations

import inspect
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

from ... import case as case_mod
from ...core import layers as layers_mod
from ...core import worker_faults
from ...core.cuda_errors import one_line, root_exception
from ...core.errors import BuildFailure
from ...core.records import RunData, RunRecord
from ...core.runner import CallLayer, Runner
from .api import known_refusal, refused
from .graphs import locate_in_megatron_graphs, resolve_site, restore_rng_values, rng_values
from .model import MegatronModel, _building_layer


class MegatronRunner(Runner):
    site_resolver = staticmethod(resolve_site)  # Megatron's bias_dropout_add draws in its own code

    def __init__(self, sut: Any, c: case_mod.Case, data: RunData, configs: List[Any], graphed_layers: List[bool]):
        self.api = sut.api
        self.spans = sut.capture_spans
        self.configs = configs
        self.graphed_layers = graphed_layers
        super().__init__(sut, c, data)
        # per-layer replays run Python (CudaGraphManager replays each layer's graphs from its
        # __call__): their masks are snapshot from the graphs' buffers per microbatch instead
        self.replay_graph_keys = c.executor == "full-iteration"
        # Megatron's DistributedDataParallel (one rank), as a user wraps a model: it gives every
        # parameter a main_grad view into its grad buffer, which backward hooks (and 0.19's graphed
        # backwards) accumulate into; recap's gradients are read from main_grad
        # Built on the stream Megatron-LM's training.py builds it on (0.19: the shared full-iteration
        # capture stream, so the AccumulateGrad nodes DDP keeps do not name a non-capturing
        # stream; else a fresh stream), see megatron/training/training.py, get_model
        shared = getattr(self.api.full_cuda_graph, "get_shared_capture_stream", None)
        ddp_stream = shared() if (shared is not None and c.executor == "full-iteration") else torch.cuda.Stream()
        ddp_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(ddp_stream):
            # the model's config (model_config_index): the schedule reads DDP's .config
            try:
                self.ddps = [self.api.DDP(config=m.config, ddp_config=self.api.DDPConfig(), module=m)
                             for m in self.ddp_modules()]
            except Exception as e:
                if known_refusal(e):
                    raise refused(sut.version, e) from None
                raise BuildFailure(e, "") from e
        torch.cuda.current_stream().wait_stream(ddp_stream)
        for p in self.params:
            p.grad = None
        self.fbf = self.api.get_forward_backward_func()
        self.full_wrapper: Any = None
        self.num_tokens = torch.ones((), dtype=torch.int, device=self.dev)
        self.build_started = False
        self.build_done = False
        self.rng_after_backwards: Optional[list] = None
        self._cur_mb = -1
        self.copied_last = False  # the step's last microbatch's gradients are in gbuf already
        # one stage: microbatch m's backward has run when m + 1's forward starts, so its gradients
        # are copied then (a pipeline stage's runner copies them itself: ranks.py)
        self.copy_at_forward = True
        for cfg in configs:
            cfg.finalize_model_grads_func = self._after_backwards
        self.pos.set(phase="", pass_="", layer="", microbatch=-1, step=-1)

    def parallel(self) -> Dict[str, Any]:
        """The model's place in a rank group (MegatronModel's tp, tp_rank, sp, span, first, last):
        one rank here."""
        return {}

    def rng_seed(self) -> int:
        """The seed megatron's training seeds this rank with (_set_random_seed): seeds.rng on one rank."""
        return self.case.seed_rng

    def ddp_modules(self) -> List[Any]:
        """What DDP wraps: the model (a rank with virtual stages: its chunks, ranks.py)."""
        return [self.model]

    def forward_microbatch(self, model: Any, prev: int) -> Tuple[int, int]:
        """(microbatch, model chunk) of the forward the schedule asks for next: one chunk here, its
        forwards in microbatch order (a rank with virtual stages tells its chunks apart: ranks.py)."""
        return prev + 1, 0

    def on_forward(self, m: int, chunk: int = 0) -> None:
        """Microbatch m's forward of a model chunk starts (a pipeline stage records it: ranks.py)."""

    def make_model(self) -> MegatronModel:
        c = self.case
        seed = self.rng_seed()
        torch.manual_seed(seed)  # as _set_random_seed (Runner.__init__ seeded seeds.rng: a later stage's differs)
        # on a rank of a group, parallel_state says its tensor-parallel rank (the tracker's seed)
        self.api.tensor_parallel.model_parallel_cuda_manual_seed(
            seed, use_cudagraphable_rng=(c.generator == "graph-safe"), force_reset_rng=True)
        try:
            model = MegatronModel(self.api, c, self.dev, self.configs, self.graphed_layers, **self.parallel())
        except Exception as e:
            if known_refusal(e):  # documented: skipped with Megatron's words
                raise refused(self.sut.version, e) from None
            raise BuildFailure(e, _building_layer(e.__traceback__)) from e
        model.check_names(c)  # outside the try: a mismatch is this driver's bug, not a refusal
        return model

    def graph_resolvers(self) -> List[Callable[[Any], str]]:
        """Megatron's graphs: a layer's (CudaGraphManager's _CudaGraphRunner.create_fwd_graph /
        create_bwd_graph; the runner's base_module is one of the model's graphable modules) or the
        whole step's (FullCudaGraphWrapper.__call__)."""
        names = {id(m): (getattr(m, "recap_layer", None) or getattr(m, "recap_path", "")) for m in self.model.graphable}

        def label(graph: Any) -> str:
            f = sys._getframe(1)
            while f is not None:
                co = f.f_code
                fn = co.co_filename.replace("\\", "/")
                if co.co_name in ("create_fwd_graph", "create_bwd_graph") and \
                        fn.endswith("megatron/core/transformer/cuda_graphs.py"):
                    base = getattr(f.f_locals.get("self"), "base_module", None)
                    name = names.get(id(base)) or getattr(base, "recap_layer", None) or getattr(base, "recap_path", "")
                    return (name or "").split(".")[0] or "?"
                if co.co_name == "__call__" and fn.endswith("megatron/core/full_cuda_graph.py") and \
                        type(f.f_locals.get("self")).__name__ == "FullCudaGraphWrapper":
                    return "iteration"
                f = f.f_back  # type: ignore[assignment]
            return ""

        return [label]

    # -- a step through forward_backward_func --

    def _after_backwards(self, *args: Any, **kwargs: Any) -> None:
        """finalize_model_grads_func: Megatron calls it after the step's backwards, right before
        create_cudagraphs(). The first time graphs are to be built, snapshot the RNG states and
        switch the observer to build mode."""
        if self.case.executor == "per-layer" and not self.build_started and any(self.graphed_layers):
            self.build_started = True
            self.rng_after_backwards = rng_values(self.api)
            self._copy_last()
            self.begin_build(self.pos.step)
            self.obs.microbatch = -1
            self.spans.begin(self)

    def _copy_grads(self, m: int) -> None:
        if m < 0:
            return
        for i, p in enumerate(self.params):
            self.gbuf[m][i].copy_(self.model.recap_layout(i, p.main_grad))

    def _copy_last(self) -> None:
        """The step's last microbatch's gradients, once (before anything reduces them)."""
        if not self.copied_last:
            self._copy_grads(self._cur_mb)
            self.copied_last = True

    def body(self, call_layer: CallLayer) -> List[Any]:
        c = self.case
        for d in self.ddps:
            d.zero_grad_buffer()
        self.copied_last = False
        losses: List[Optional[torch.Tensor]] = [None] * c.microbatches
        state = {"m": -1, "peak": 0}
        self._cur_mb = -1
        graphs_replay = self.case.executor == "per-layer" and self.build_done

        def data() -> Iterator[Dict[str, torch.Tensor]]:
            for m in range(c.microbatches):
                yield {"x": self.inp[m], "t": self.tgt[m]}

        def forward_step_func(data_iterator: Iterator[Dict[str, torch.Tensor]], model: Any) -> Any:
            prev = state["m"]
            if prev >= 0 and self.copy_at_forward:  # microbatch prev's backward has run
                if graphs_replay:
                    self.obs.snapshot_graph_keys(prev)
                self._copy_grads(prev)
            m, chunk = self.forward_microbatch(model, prev)
            state["m"] = max(prev, m)
            self._cur_mb = m
            self.on_forward(m, chunk)
            batch = next(data_iterator)
            self.obs.microbatch = m
            self.pos.set(pass_="forward", microbatch=m, layer="")
            a0 = self.obs.allocated()
            x = batch["x"].detach().requires_grad_(True)
            y = model(x)
            if worker_faults.pending:  # a planted worker fault (PROTOCOL.md)
                worker_faults.at_forward(self)
            state["peak"] = max(state["peak"], max(0, self.obs.allocated() - a0))
            self.pos.set(pass_="backward", layer="")
            t = batch["t"]

            def loss_func(out: torch.Tensor) -> Any:
                loss = layers_mod.mse_loss(out, t)
                losses[m] = loss
                return loss, self.num_tokens, {"loss": loss.detach()}

            return y, loss_func

        # one model: its DDP and one data iterator; model chunks (virtual stages): a list of each,
        # as the interleaved schedule asserts (each chunk's forwards take every microbatch in order)
        chunked = len(self.ddps) > 1
        kw = dict(forward_step_func=forward_step_func,
                  data_iterator=[data() for _ in self.ddps] if chunked else data(),
                  model=self.ddps if chunked else self.ddps[0],
                  num_microbatches=c.microbatches, seq_length=c.tokens, micro_batch_size=1,
                  forward_only=False)
        fn = self.full_wrapper if self.full_wrapper is not None else self.fbf
        fn(**kw)
        if self.full_wrapper is not None:
            if state["m"] >= 0 and self.obs.mode == "build":  # this call captured the step
                self.static_losses = list(losses)
            elif state["m"] < 0:  # a replay: no Python ran, the losses are the captured tensors
                losses = list(self.static_losses or losses)
                state["m"] = c.microbatches - 1  # the graph copied the others' gradients
        last = state["m"]
        if graphs_replay:
            self.obs.snapshot_graph_keys(last)
        if not self.copied_last:  # (the step that began building graphs copied them before)
            self._copy_grads(last)
        if self.build_started and not self.build_done:
            self._end_megatron_build()
        self.body_activations = state["peak"]
        self.pos.set(pass_="", layer="", microbatch=-1)
        with torch.no_grad():
            for p in self.params:
                g = getattr(p, "main_grad", None)  # None: a parameter of no chunk this rank runs
                if g is not None:
                    p.add_(g, alpha=-c.lr)
        return losses

    def _end_megatron_build(self) -> None:
        self.spans.end()
        self.build_done = True
        self.obs.mode = "live"
        self.sync()
        if self.rng_after_backwards is not None:
            restore_rng_values(self.api, self.rng_after_backwards)
        self.capture_memory(self.spans.forward_bytes)

    # -- failures --

    def refine_failure(self, f: Dict[str, Any], e: BaseException) -> None:
        where = locate_in_megatron_graphs(root_exception(e).__traceback__) or \
            locate_in_megatron_graphs(e.__traceback__)
        if where is not None:
            f["phase"] = where["phase"]
            f["pass"] = where["pass"] or f["pass"]
            if where["layer"]:
                f["layer"] = where["layer"]
            f["message"] = one_line(f"{f['message']} (megatron-core {where['function']})")

    def recover(self) -> None:
        super().recover()
        # a capture that failed can leave the CUDA generator in capture mode ("Offset increment
        # outside graph capture"): then this process must not serve another case
        try:
            torch.empty(1, device=self.dev).uniform_()
            self.sync()
        except Exception as e:
            self.record.fatal = True
            print(f"recap worker: the CUDA generator is unusable after a failed capture: "
                  f"{one_line(str(e))}", file=sys.stderr)

    # -- executors --

    def run(self) -> RunRecord:
        try:
            return super().run()
        finally:
            self.spans.end()

    def run_per_layer(self) -> None:
        # step 0 eagerly (CudaGraphManager records; graphs are made at its end), then replays
        c = self.case
        for s in range(c.steps):
            phase = "warmup" if s == 0 else "replay"
            try:
                rec = self.eager_step(s, "warmup") if s == 0 else self.replay_step(s)
                self.record.steps.append(rec)
            except Exception as e:
                self.fail(e, "capture" if self.build_started and not self.build_done else phase)
                return

    def run_full_iteration(self) -> None:
        c = self.case
        fcg = self.api.full_cuda_graph
        kw = {}
        if "use_single_mempool" in inspect.signature(fcg.FullCudaGraphWrapper.__init__).parameters:
            kw["use_single_mempool"] = True
        self.full_wrapper = fcg.FullCudaGraphWrapper(self.fbf, cuda_graph_warmup_steps=c.warmup, **kw)
        for s in range(c.steps):
            try:
                if s < c.warmup:
                    self.record.steps.append(self.eager_step(s, "warmup"))
                elif s == c.warmup:
                    self.record.steps.append(self._capture_step(s))
                else:
                    self.record.steps.append(self.replay_step(s))
            except Exception as e:
                self.fail(e, "capture" if s == c.warmup else ("warmup" if s < c.warmup else "replay"))
                return

    def _capture_step(self, s: int) -> Any:
        """Step W: this call captures the whole step (inside Megatron's wrapper) and replays it."""
        self.begin_build(s)
        t0 = time.perf_counter()
        self.load_data(s)
        self.obs.begin_step()
        self.spans.begin(self)
        losses = self.body(self.call_eager)
        self.spans.end()
        self.obs.mode = "live"
        rec = self.finish(s, "replay", losses, t0, graph_keys=True)
        self.capture_memory(self.body_activations)  # after finish, as the replays' peaks are read
        return rec
