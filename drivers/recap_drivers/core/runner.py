"""One execution of a case (Runner): recap's training steps run eagerly or replayed, each step's
record, and a failure recorded where it happened. A framework's runner (frameworks/) subclasses it
and says how its graphs are made (run_per_layer, run_full_iteration) and, where it differs, how a
step runs (body) and where in its own code a failure happened (refine_failure).

A training step (recap's Trainer): zero the gradients; for each entry of the microbatch order a
forward (input -> layers -> recap's mse loss) or a backward (loss.backward(), then a copy of every
accumulated gradient); then SGD p -= lr * grad. Gradients live in preallocated .grad tensors that
backward accumulates into in place, so eager and graphed steps run the same kernels.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

import torch

from .. import case as case_mod
from . import download, worker_faults
from . import layers as layers_mod
from .cuda_errors import STICKY, cuda_api_name, cuda_error_name, host_out_of_memory, one_line, root_exception
from .leaks import allocation_sites
from .observe.graphs import pool_bytes, pool_figures
from .observe.masks import MaskObserver
from .profile import Profile
from .profile import phase as profile_phase
from .records import RunData, RunRecord, StepRecord, to_f32
from .replies import FAULT
from .tracebacks import layer_from_traceback

CallLayer = Callable[[int, int, torch.Tensor], torch.Tensor]


class Runner:
    # Where a dropout no site was opened for was drawn (MaskObserver.site_resolver), or None.
    site_resolver: Optional[Callable[[], Any]] = None
    # Whether a replay step reports the masks drawn inside graphs (its graphs ran no Python).
    replay_graph_keys = True

    def __init__(self, sut: Any, c: case_mod.Case, data: RunData):
        self.sut = sut
        self.case = c
        self.data = data
        self.dev = sut.device
        self.cuda = self.dev.type == "cuda"
        self.dt = layers_mod.TORCH_DTYPES[c.dtype]
        self.run_base = torch.cuda.memory_allocated() if self.cuda else 0
        self.prof: Optional[Profile] = None  # the run request's "profile" (SUT.execute sets it after the build)
        # the run's observer, before the model: its layers report to it (attach_observer)
        self.obs = MaskObserver(self.dev, self.site_resolver)
        self.pos = self.obs.position
        torch.manual_seed(c.seed_rng)  # seeds the CPU and every CUDA generator
        self.model = self.make_model()
        layers_mod.attach_observer(self.model, self.obs)
        self.model.load(data.params)
        self.params = self.model.params
        for p in self.params:
            p.grad = torch.zeros_like(p)
        M = c.microbatches
        shape = (c.tokens, c.hidden)
        self.inp = [torch.zeros(shape, dtype=self.dt, device=self.dev) for _ in range(M)]
        self.tgt = [torch.zeros(shape, dtype=self.dt, device=self.dev) for _ in range(M)]
        self.gbuf = [[torch.zeros_like(p) for p in self.params] for _ in range(M)]
        self.order = c.order()
        self.last_backward = -1
        b = 0
        for e in self.order:
            if e < 0:
                self.last_backward = b
                b += 1
        plan = []
        for s in case_mod.drop_sites(c):
            for m in range(M):
                for ps in ("forward", "recompute"):
                    plan.append(((s.layer, s.op, m, ps), s.numel))
        self.obs.plan(plan)
        self.graphs = sut.graph_observer
        self.graphs.resolvers = self.graph_resolvers()
        self.record = RunRecord(self.model.param_names, [tuple(p.shape) for p in self.params])
        self.pos.set(phase="", pass_="", layer="", microbatch=-1, step=-1)
        self.static_losses: Optional[List[Any]] = None
        self.mem_eager = 0
        self.side = sut.side_stream  # one per worker: a new stream gets new cuBLAS workspaces
        self.body_activations = 0
        self.layer_names = c.layer_names()
        # measuring (the `measure` request, recap tradeoff): no result is downloaded and each step
        # that is neither a warmup nor a capture is timed, its work alone (timed_step)
        self.measuring = False
        self.timed: List[Dict[str, float]] = []  # per timed step: ms, peak_allocated, peak_reserved
        self.capture_ms: Optional[float] = None  # how long the graphs took to make
        # a data-parallel replica's gradient sum over the replicas, run before the update (None: none)
        self.reduce_grads: Optional[Callable[[], None]] = None
        self._build_t0 = 0.0

    # -- what a framework's runner says --

    def make_model(self) -> Any:
        return layers_mod.Model(self.case, self.dev)

    def graph_resolvers(self) -> List[Callable[[Any], str]]:
        """Functions that name the layer of a graph being captured (GraphObserver)."""
        return []

    def layer_figures(self) -> List[Dict[str, Any]]:
        """Per layer, what a measured run can say of it (the `measure` reply's per_layer): nothing here."""
        return []

    def run_per_layer(self) -> None:
        raise NotImplementedError

    def run_full_iteration(self) -> None:
        raise NotImplementedError

    def refine_failure(self, f: Dict[str, Any], e: BaseException) -> None:
        """Where in the framework's own code a failure happened, written into f (nothing here)."""

    # -- pieces --

    def sync(self) -> None:
        if self.cuda:
            with profile_phase(self.prof, "sync_ms"):
                torch.cuda.synchronize()
        elif worker_faults.lost:  # the planted lost context, emulated on the CPU: as CUDA would
            raise RuntimeError(worker_faults.lost)

    def load_data(self, step: int) -> None:
        with profile_phase(self.prof, "h2d_ms"):
            with torch.no_grad():
                for m in range(self.case.microbatches):
                    self.inp[m].copy_(self.data.inputs[(step, m)].to(self.dev, self.dt))
                    self.tgt[m].copy_(self.data.targets[(step, m)].to(self.dev, self.dt))
            if self.prof is not None and self.cuda:
                torch.cuda.synchronize()  # profiling only: the copies are the copies' time, not the step's

    def call_eager(self, l: int, m: int, x: torch.Tensor) -> torch.Tensor:
        return self.model.layers[l](x)

    def call_replay(self, l: int, m: int, x: torch.Tensor) -> torch.Tensor:
        return self.model.layers[l](x)

    def body(self, call_layer: CallLayer) -> List[Any]:
        """One training step's work (eager, or captured whole)."""
        c = self.case
        for p in self.params:
            p.grad.zero_()
        losses: List[Optional[torch.Tensor]] = [None] * c.microbatches
        held = [0] * c.microbatches  # bytes each microbatch's forward left allocated
        inflight: List[int] = []
        peak = 0
        f = b = 0
        for e in self.order:
            if e > 0:
                m = f
                f += 1
                self.obs.microbatch = m
                self.pos.set(pass_="forward", microbatch=m, layer="")
                a0 = self.obs.allocated()
                x = self.inp[m].detach().requires_grad_(True)
                for l in range(len(c.layers)):
                    self.pos.set(pass_="forward", layer=self.layer_names[l])
                    x = call_layer(l, m, x)
                    if worker_faults.pending and l == 0:  # a planted worker fault (PROTOCOL.md)
                        worker_faults.at_forward(self)
                self.pos.set(layer="loss")
                losses[m] = layers_mod.mse_loss(x, self.tgt[m])
                del x
                held[m] = max(0, self.obs.allocated() - a0)
                inflight.append(m)
                peak = max(peak, sum(held[k] for k in inflight))
            else:
                m = b
                b += 1
                self.obs.microbatch = m
                self.pos.set(pass_="backward", microbatch=m, layer="")
                losses[m].backward()  # type: ignore[union-attr]  # its forward came first (case.order)
                for i, p in enumerate(self.params):
                    self.gbuf[m][i].copy_(p.grad)
                if m in inflight:
                    inflight.remove(m)
        self.body_activations = peak
        self.pos.set(pass_="", layer="", microbatch=-1)
        self.update()
        return losses

    def update(self) -> None:
        """The step's update: SGD p -= lr * grad, the gradients first summed over the data-parallel
        replicas where this run is one (reduce_grads; the step then reports the summed gradients)."""
        if self.reduce_grads is not None:
            self.reduce_grads()
        with torch.no_grad():
            for p in self.params:
                p.add_(p.grad, alpha=-self.case.lr)

    def applied_grads(self) -> List[torch.Tensor]:
        """The gradients the step's update applied, where they are not its last microbatch's
        accumulation (a data-parallel replica's, summed over the replicas), in recap's layout; else none."""
        return [p.grad for p in self.params] if self.reduce_grads is not None else []

    def timed_step(self, work: Callable[[], List[Any]]) -> List[Any]:
        """Runs a step's work; while measuring, timed between two CUDA events on the current stream
        (the host clock on the CPU), with the allocator's peaks over it."""
        if not self.measuring:
            return work()
        self.sync()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            losses = work()
            end.record()
            end.synchronize()
            self.sync()
            self.timed.append({"ms": float(start.elapsed_time(end)),
                               "peak_allocated": float(torch.cuda.max_memory_allocated()),
                               "peak_reserved": float(torch.cuda.max_memory_reserved())})
            return losses
        t0 = time.perf_counter()
        losses = work()
        self.timed.append({"ms": (time.perf_counter() - t0) * 1e3})
        return losses

    def finish(self, step: int, phase: str, losses: List[Any], t0: float, graph_keys: bool) -> StepRecord:
        if self.measuring:  # nothing is judged: no download (at a large size it costs more than the step)
            self.sync()
            return StepRecord(step, phase, [], [], (time.perf_counter() - t0) * 1e3, [], [], [], self.graphs.take_replays())
        self.sync()
        t_d2h = time.perf_counter() if self.prof is not None else 0.0
        # in recap's layout, as the gradients are (megatron keeps qkv rows in its own order)
        layout = getattr(self.model, "recap_layout", None)
        live = [l.detach().reshape(()) for l in losses if l is not None]
        rows = [[g.detach().float() for g in row] for row in self.gbuf]
        # a data-parallel replica reports the gradients the update applied (summed over the replicas)
        reduced = [g.detach().float() for g in self.applied_grads()]
        on_device = live + [g for row in rows for g in row] + reduced + \
            [(layout(i, p.detach()) if layout else p.detach()).float() for i, p in enumerate(self.params)]
        host = iter(download.to_host(on_device))  # one copy per dtype: one wait for the GPU, not hundreds
        # recap stores a loss as fp32 (accumulated in double): report the double rounded to fp32
        vals = [to_f32(float(next(host).item())) if l is not None else float("nan") for l in losses]
        grads_mb = [[next(host) for _ in row] for row in rows]
        grads = grads_mb[self.last_backward] if self.last_backward >= 0 else []
        if reduced:
            grads = [next(host) for _ in reduced]
        params = [next(host) for _ in self.params]
        if self.prof is not None:
            self.prof.add("d2h_ms", (time.perf_counter() - t_d2h) * 1e3)
        masks = self.obs.collect(graph_keys)
        # the graph pools after the step: a pool that grows from one replay to the next leaks
        pools, used = pool_figures() if self.cuda else (0, 0)
        return StepRecord(step, phase, vals, masks, (time.perf_counter() - t0) * 1e3, grads_mb, grads, params,
                          self.graphs.take_replays(), pools, used)

    def eager_step(self, step: int, phase: str, on_side: bool = False) -> StepRecord:
        with profile_phase(self.prof, "warmup_ms" if phase == "warmup" else "eager_steps_ms"):
            return self._eager_step(step, phase, on_side)

    def _eager_step(self, step: int, phase: str, on_side: bool) -> StepRecord:
        t0 = time.perf_counter()
        self.pos.set(phase=phase, step=step)
        self.load_data(step)
        self.obs.begin_step()
        if on_side and self.cuda:
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                losses = self.body(self.call_eager)
            torch.cuda.current_stream().wait_stream(self.side)
        elif phase == "eager":  # the eager executor's steps (a warmup is not timed)
            losses = self.timed_step(lambda: self.body(self.call_eager))
        else:
            losses = self.body(self.call_eager)
        rec = self.finish(step, phase, losses, t0, graph_keys=False)
        self.mem_eager = max(self.mem_eager, self.body_activations)
        return rec

    def replay_losses(self) -> List[Any]:
        """A replay step's work: the layers, graphed ones through their graphs."""
        return self.body(self.call_replay)

    def replay_step(self, step: int) -> StepRecord:
        with profile_phase(self.prof, "replay_ms"):
            return self._replay_step(step)

    def _replay_step(self, step: int) -> StepRecord:
        t0 = time.perf_counter()
        self.pos.set(phase="replay", step=step)
        self.load_data(step)
        self.obs.begin_step()
        if self.cuda:
            self.sync()
            torch.cuda.reset_peak_memory_stats()
        losses = self.timed_step(self.replay_losses)
        if self.cuda:  # the replay's peak, read before the step's results are downloaded
            self.sync()
            m = self.record.memory
            m["replay_peak_bytes"] = max(m["replay_peak_bytes"], torch.cuda.max_memory_allocated() - self.run_base)
        return self.finish(step, "replay", losses, t0, graph_keys=self.replay_graph_keys)

    # -- building graphs: the memory figures --

    def begin_build(self, step: int) -> None:
        """Graphs are made from here: the capture's peak is counted from here, draws on a
        capturing stream are the graphs' (MaskObserver mode "build")."""
        self.sync()
        gc.collect()
        torch.cuda.reset_peak_memory_stats()
        self._build_t0 = time.perf_counter()
        self.pos.set(phase="capture", step=step, pass_="", layer="", microbatch=-1)
        self.obs.mode = "build"

    def end_build(self, activations: int) -> None:
        self.obs.mode = "live"
        self.sync()
        self.capture_memory(activations)

    def capture_memory(self, activations: int) -> None:
        """The memory figures of the graphs just made: the capture's peak above the run's base,
        the activations the graphs hold, the bytes of the graph pools."""
        self.capture_ms = (time.perf_counter() - self._build_t0) * 1e3
        if self.prof is not None:
            self.prof.add("capture_ms", self.capture_ms)
        m = self.record.memory
        m["capture_peak_bytes"] = int(max(0, torch.cuda.max_memory_allocated() - self.run_base))
        m["activations_in_graphs_bytes"] = int(activations)
        m["graph_pool_bytes"] = int(pool_bytes())

    # -- failures --

    def failure(self, e: BaseException, phase: str, where: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        """The failure record of e in `phase`, at the run's position; `where` (phase, pass, layer),
        when the caller located it inside the framework's graph making, overrides the position."""
        root = root_exception(e)
        msg = one_line(str(root) or type(root).__name__)
        full = str(root) + " " + str(e)
        err = cuda_error_name(full) or host_out_of_memory(full) or type(root).__name__
        pos = self.pos
        f: Dict[str, Any] = {"phase": phase, "pass": pos.pass_, "layer": pos.layer, "microbatch": pos.microbatch,
                             "step": pos.step, "api": cuda_api_name(full), "error": err, "message": msg}
        if where is not None:
            f["phase"] = where["phase"]
            f["pass"] = where["pass"]
            if where["layer"]:
                f["layer"] = where["layer"]
        tb_layer = layer_from_traceback(root.__traceback__) or layer_from_traceback(e.__traceback__)
        if tb_layer and (f["pass"] == "backward" or not f["layer"]):
            f["layer"] = tb_layer
        if err in STICKY:
            self.record.fatal = True
        if err == "cudaErrorMemoryAllocation" and os.environ.get("RECAP_LEAK_REPORT") and torch.cuda.is_available():
            allocation_sites(f"out of memory in the {phase} of case {self.case.name!r}")  # what filled it
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
        self.refine_failure(f, e)
        return f

    def fail(self, e: BaseException, phase: str, where: Optional[Dict[str, str]] = None) -> None:
        """The run ends with this failure: recorded, the observer back to live draws, the device
        checked (recover). The one place a run's failure is handled."""
        self.record.failure = self.failure(e, phase, where)
        self.obs.mode = "live"
        self.recover()

    def recover(self) -> None:
        try:
            self.sync()
        except Exception as e:  # the context is gone: the worker must not serve another case
            self.record.fatal = True
            print(f"recap worker: CUDA context unusable after a failure: {one_line(str(e))}", file=sys.stderr)

    # -- executors --

    def run(self) -> RunRecord:
        t0 = time.perf_counter()
        gc_was_on = gc.isenabled()
        if self.cuda:
            self.graphs.install()
            # The memory figures are differences of memory_allocated() around a forward or a capture:
            # a cyclic collection inside one frees some other case's tensor and takes a block off
            # the figure (results/h200/2026-12-02-issue20: the kept M3 file passed on 0.18.2 by one
            # 512 B block). Collected now, not during the steps; the framework computes the same.
            gc.collect()
            gc.disable()
        self.graphs.begin_run()
        self.obs.start()
        try:
            ex = self.case.executor
            if FAULT == "twin-fails" and not self.case.any_checkpoint():
                self.record.failure = {"phase": "eager" if ex == "eager" else "warmup", "pass": "", "layer": "",
                                       "microbatch": -1, "step": 0, "api": "", "error": "RuntimeError",
                                       "message": "planted fault twin-fails"}
            elif ex == "eager":
                self.run_eager()
            elif not self.cuda and FAULT == "no-graphs":
                self.run_eager(graphs_forgotten=True)
            elif ex == "per-layer":
                self.run_per_layer()
            else:
                self.run_full_iteration()
        finally:
            self.obs.stop()
            self.record.captures = dict(self.graphs.captures)
            self.graphs.end_run()
            self.pos.set(phase="", pass_="", layer="", microbatch=-1, step=-1)
            if gc_was_on:
                gc.enable()
        self.record.memory["activations_eager_bytes"] = int(self.mem_eager)
        self.record.run_ms = (time.perf_counter() - t0) * 1e3
        return self.record

    def run_eager(self, graphs_forgotten: bool = False) -> None:
        for s in range(self.case.steps):
            # the planted fault no-graphs: a graphed case's steps labelled as if graphs ran
            phase = ("warmup" if s < self.case.warmup else "replay") if graphs_forgotten else "eager"
            try:
                self.record.steps.append(self.eager_step(s, phase))
            except Exception as e:
                self.fail(e, "eager")
                return

    def warmup(self) -> bool:
        """Steps 0 .. W-1 eagerly on the side stream; False when one failed."""
        for s in range(self.case.warmup):
            try:
                self.record.steps.append(self.eager_step(s, "warmup", on_side=True))
            except Exception as e:
                self.fail(e, "warmup")
                return False
        return True

    def replays(self) -> None:
        c = self.case
        for s in range(c.warmup, c.steps):
            try:
                self.record.steps.append(self.replay_step(s))
            except Exception as e:
                self.fail(e, "replay")
                return
