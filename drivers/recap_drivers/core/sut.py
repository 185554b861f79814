"""The SUT base: what every framework's SUT does the same way. It sets the device up
(determinism, cuBLAS workspaces, a memory cap), serves a run request (the case, its frames, the
skip policy, the determinism check, the reply) and cleans up between cases (leaks.py). A
framework's SUT (frameworks/) says what it can run (capabilities, why_skipped), which runner runs
a case (make_runner) and what it resets between cases (between_cases).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA initializes

import torch  # noqa: E402

from .. import case as case_mod  # noqa: E402
from . import replies, worker_faults  # noqa: E402
from .cuda_errors import OUT_OF_MEMORY, cuda_error_name, one_line  # noqa: E402
from .errors import BuildFailure, RequestError, SkipCase  # noqa: E402
from .leaks import collect_between_cases, leak_report, memory_trace, release_stray_graphs  # noqa: E402
from .observe.graphs import GraphObserver  # noqa: E402
from .profile import Profile, phase  # noqa: E402
from .protocol import Frame  # noqa: E402
from .records import RunData, RunRecord, build_failure_record, first_difference, read_run_data  # noqa: E402
from .runner import Runner  # noqa: E402


def visible_device_of(device: torch.device, cuda_visible_devices: Optional[str]) -> Dict[str, Any]:
    """The hello's visible_device for `device` (core/sut.py SUT.visible_device)."""
    out: Dict[str, Any] = {"cuda_visible_devices": cuda_visible_devices, "uuid": None, "pci_bus_id": None}
    if device.type != "cuda":
        return out
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)  # torch prints it without nvidia-smi's "GPU-"
    if uuid is not None:
        text = str(uuid)
        out["uuid"] = text if text.startswith("GPU-") else "GPU-" + text
    bus, dom, dev = (getattr(props, k, None) for k in ("pci_bus_id", "pci_domain_id", "pci_device_id"))
    if isinstance(bus, int) and isinstance(dom, int) and isinstance(dev, int):  # torch >= 2.2
        out["pci_bus_id"] = f"{dom:08x}:{bus:02x}:{dev:02x}.0"
    return out


def device_state_model() -> str:
    """torch <= 2.11 keeps one device (seed, offset) pair per generator state for all graphs
    (recap's "shared"); later versions key them by capture (CUDAGeneratorCaptureState)."""
    try:
        h = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "cuda", "CUDAGeneratorImpl.h")
        with open(h, "r", encoding="utf-8", errors="replace") as fh:
            return "per-capture" if "CUDAGeneratorCaptureState" in fh.read() else "shared"
    except OSError:
        pass
    v = re.match(r"(\d+)\.(\d+)", torch.__version__)
    if v and (int(v.group(1)), int(v.group(2))) <= (2, 11):
        return "shared"
    return "per-capture"


def setup_determinism() -> None:
    torch.use_deterministic_algorithms(True)
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    except Exception:
        pass
    try:
        torch.set_float32_matmul_precision("highest")
    except Exception:
        pass
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def synthetic_run_data(c: case_mod.Case, device: torch.device) -> RunData:
    """A measure request's data, made here rather than sent (at a large size every step's input
    frames would be gigabytes): parameters scaled as a framework initializes them (matrices
    N(0, 1/fan_in), norm weights 1, biases 0) and one input and target per microbatch in [-1, 1),
    every step training on the same, from the case's seeds. Step times do not depend on values.

    Drawn by the device's generator: at the compute-bound size (4 blocks, hidden 4096) the CPU's
    made 805 M normal draws on one thread, seconds of every configuration's measurement. The
    parameters come back to the host, one at a time, and the device's cache is emptied after, so
    the run's memory figures (its base, peaks and device use) are those of data made on the host."""
    g = torch.Generator(device=device)
    g.manual_seed(c.seed_param)
    params: Dict[str, torch.Tensor] = {}
    for p in case_mod.param_infos(c):
        if len(p.shape) >= 2:
            params[p.name] = (torch.randn(p.shape, generator=g, device=device) / float(p.shape[-1]) ** 0.5).cpu()
        elif p.name.endswith("bias"):
            params[p.name] = torch.zeros(p.shape)
        else:
            params[p.name] = torch.ones(p.shape)
    g.manual_seed(c.seed_data)
    shape = (c.tokens, c.hidden)
    inputs: Dict[Tuple[int, int], torch.Tensor] = {}
    targets: Dict[Tuple[int, int], torch.Tensor] = {}
    if device.type == "cuda":
        torch.cuda.empty_cache()  # the draws' blocks: not the run's memory
    for m in range(c.microbatches):
        x = torch.rand(shape, generator=g, device=device).mul_(2).sub_(1)  # in place: no temporary block
        t = torch.rand(shape, generator=g, device=device).mul_(2).sub_(1)
        for s in range(c.steps):
            inputs[(s, m)] = x
            targets[(s, m)] = t
    return RunData(params, inputs, targets)


def eager_key(case: Any, frames: List[Frame]) -> str:
    """What makes two run requests' eager forms the same execution: the case as sent with its
    executor eager (canonical JSON) and every frame's name and bytes."""
    h = hashlib.sha256(json.dumps(dict(case, executor="eager"), sort_keys=True, separators=(",", ":")).encode())
    for f in sorted(frames, key=lambda f: f.name):
        h.update(f.name.encode() + b"\0")
        h.update(f.data)
    return h.hexdigest()


def default_order(c: case_mod.Case) -> List[int]:
    """Each microbatch's forward then its backward: [1, -1] per microbatch."""
    order: List[int] = []
    for _ in range(c.microbatches):
        order += [1, -1]
    return order


class SUT:
    name = ""

    def __init__(self, device: str = "auto"):
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda: torch.cuda.is_available() is false")
        self.device = torch.device(device)
        setup_determinism()
        self.graphs = self.device.type == "cuda"
        self.device_state = device_state_model()
        self.side_stream = torch.cuda.Stream(self.device) if self.graphs else None
        # the runs' graph observer: its wrappers are class-level, installed once per process
        self.graph_observer = GraphObserver()
        if self.graphs:
            self._prime_cublas()
            # Campaigns run many workers on one GPU: a cap keeps one that leaks from starving the
            # others (its own cases then fail with an out-of-memory error that names it).
            frac = os.environ.get("RECAP_CUDA_MEMORY_FRACTION", "")
            if frac:
                torch.cuda.set_per_process_memory_fraction(float(frac))  # the current device
        # bytes the allocator holds before any case: what is held above it after one is reported
        self.base_allocated = torch.cuda.memory_allocated(self.device) if self.graphs else 0
        self.base_reserved = torch.cuda.memory_reserved(self.device) if self.graphs else 0
        self.retire = False  # worker.serve adds `retire` to the reply and the client replaces us
        self.held_after = 0  # bytes still allocated or reserved after the last case (the reason to retire)
        # a graphed case's determinism check's first eager run, which answers its eager twin's
        # request (PROTOCOL.md, section 6): (eager_key, the run's record) or None
        self.held_eager: Optional[Tuple[str, RunRecord]] = None
        self.retire_bytes = int(os.environ.get("RECAP_WORKER_RETIRE_MIB", "1024")) << 20  # 0: never
        if self.graphs and os.environ.get("RECAP_LEAK_REPORT"):
            torch.cuda.memory._record_memory_history(max_entries=200000)

    # -- what a framework's SUT says --

    def capabilities(self) -> Dict[str, Any]:
        raise NotImplementedError

    def why_skipped(self, c: case_mod.Case) -> str:
        """"" when the case runs here, else one line: the dimension and why it cannot run."""
        raise NotImplementedError

    def make_runner(self, c: case_mod.Case, data: RunData) -> Runner:
        """The runner of one execution; it may raise SkipCase or BuildFailure while building."""
        raise NotImplementedError

    def between_cases(self) -> None:
        """The framework's own state cleared after a case (nothing here)."""

    def sut_version(self) -> str:
        return str(torch.__version__)

    def hello(self) -> Dict[str, Any]:
        # "ops": the requests served beyond hello, run and shutdown (a client checks before it asks)
        return {"sut": self.name, "version": self.sut_version(), "device": self.device_name(),
                "visible_device": self.visible_device(),
                "capabilities": self.capabilities(), "ops": ["measure"]}

    def measured_case(self, c: case_mod.Case) -> case_mod.Case:
        """The case a measure request runs so that c.replays steps are timed (a framework whose
        capture step also trains adds one)."""
        return c

    # -- the device --

    def _prime_cublas(self) -> None:
        """cuBLAS allocates a workspace per (handle, stream) on its first GEMM there: make ours
        now, so an eager step never allocates one (the observer reads the allocator around GEMMs
        only while graphs are built, whose captures make their own)."""
        for st in (torch.cuda.current_stream(self.device), self.side_stream):
            with torch.cuda.stream(st):
                for dt in (torch.float32, torch.bfloat16):
                    a = torch.ones(64, 64, device=self.device, dtype=dt, requires_grad=True)
                    (a @ a).sum().backward()
                    torch.bmm(a.detach()[None], a.detach()[None])
        torch.cuda.synchronize(self.device)

    def _clear_cublas_workspaces(self) -> None:
        """torch caches a cuBLAS workspace (32 MiB under CUBLAS_WORKSPACE_CONFIG=:4096:8) per
        (handle, stream) and never frees it; make_graphed_callables warms up on a new stream per
        call and Megatron captures on new streams, so every case left 32 MiB more allocated, up
        to out-of-memory errors in later cases (results/h200/2026-12-01-sut-campaigns). torch's
        own leak checks and cudagraph trees clear them the same way (common_utils.py,
        cudagraph_trees.py). Between cases no graph is alive; ours are made again."""
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
            self._prime_cublas()

    def visible_device(self) -> Dict[str, Any]:
        """What this worker sees of its GPU (PROTOCOL.md, hello): the CUDA_VISIBLE_DEVICES of its
        environment (None when unset) and the uuid ("GPU-...", as nvidia-smi writes it) and PCI bus
        id of the device it uses (None on the CPU). recap --gpus reports which GPU a job ran on from
        this, not from what it asked for."""
        return visible_device_of(self.device, os.environ.get("CUDA_VISIBLE_DEVICES"))

    def device_name(self) -> str:
        if self.device.type == "cuda":
            return str(torch.cuda.get_device_name(self.device))
        return "cpu"

    # -- a run request --

    def run(self, request: Dict[str, Any], frames: List[Frame]) -> Tuple[Dict[str, Any], List[Frame]]:
        if not worker_faults.FAULTS:
            return self.serve_run(request, frames)
        worker_faults.arm(request.get("case"))  # a planted worker fault for this case (PROTOCOL.md)
        try:
            return self.serve_run(request, frames)
        finally:
            worker_faults.disarm()

    def serve_run(self, request: Dict[str, Any], frames: List[Frame]) -> Tuple[Dict[str, Any], List[Frame]]:
        rid = request.get("id")
        if "case" not in request:
            raise RequestError("run: missing 'case'")
        # "profile": true (PROTOCOL.md): this run's phases in the reply's timings.profile
        prof = Profile() if request.get("profile", False) is True else None
        t_parse = time.perf_counter()
        try:
            c = case_mod.parse_case(request["case"], extension_styles=case_mod.EXTENSION_STYLES)
        except case_mod.CaseError as e:
            raise RequestError(f"case: {e}") from None
        # on the device once per request: its runs (the determinism check's two and the case's own)
        # copy from there instead of from the host, tensor by tensor
        data = read_run_data(c, frames).on(self.device)
        mask_frames = bool(request.get("mask_frames", False))
        names = [p.name for p in case_mod.param_infos(c)]
        if prof is not None:
            prof.add("parse_ms", (time.perf_counter() - t_parse) * 1e3)
        reason = self.why_skipped(c)
        if reason:
            return replies.skipped(rid, names, reason, 0.0)
        t0 = time.perf_counter()
        if worker_faults.lost:  # the planted lost context, emulated on the CPU: nothing runs any more
            rec = RunRecord(names, [tuple(p.shape) for p in case_mod.param_infos(c)])
            rec.failure = {"phase": "build", "pass": "", "layer": "", "microbatch": -1, "step": -1, "api": "",
                           "error": cuda_error_name(worker_faults.lost), "message": one_line(worker_faults.lost)}
            rec.fatal = True
            return replies.observation(rid, rec, "failed", mask_frames, t0)
        try:
            first = None
            if request.get("determinism_check", False):
                self.held_eager = None
                ec = c.with_executor("eager")
                # an eager case's first run is the case's own (its phases are the case's); the other
                # run, and both for a graphed case, are the check's
                if c.executor == "eager":
                    r1 = self.execute(ec, data, prof)
                else:
                    with phase(prof, "determinism_check_ms"):
                        r1 = self.execute(ec, data)
                # a device that became unusable, or an allocator that ran out, is the case's
                # failure, not a difference between two runs (the second would run on a fresh heap)
                if r1.fatal or (r1.failure is not None and r1.failure.get("error") in OUT_OF_MEMORY):
                    return replies.observation(rid, r1, "failed", mask_frames, t0)
                with phase(prof, "determinism_check_ms"):
                    r2 = self.execute(ec, data)
                    diff = first_difference(r1, r2)
                if diff:
                    return replies.skipped(rid, names, f"nondeterministic: {diff}", (time.perf_counter() - t0) * 1e3)
                if c.executor == "eager":
                    first = r1
                elif r1.failure is None:
                    # the eager twin recap asks for next is this very run: kept for that request
                    self.held_eager = (eager_key(request["case"], frames), r1)
            elif c.executor == "eager" and not worker_faults.pending and self.held_eager is not None:
                key, held = self.held_eager
                if key == eager_key(request["case"], frames):
                    self.held_eager = None
                    h, out = replies.observation(rid, held, "ok", mask_frames, t0)
                    h["reused"] = "determinism_check"  # PROTOCOL.md, section 6
                    return h, out
            rec = first if first is not None else self.execute(c, data, prof)
        except SkipCase as e:
            return replies.skipped(rid, names, str(e), (time.perf_counter() - t0) * 1e3)
        with phase(prof, "encode_ms"):
            h, out = replies.observation(rid, rec, "failed" if rec.failure else "ok", mask_frames, t0)
        if prof is not None:
            prof.ms["run_ms"] = (time.perf_counter() - t0) * 1e3
            h["timings"]["profile"] = dict(prof.ms)
        return h, out

    # -- a measure request (recap tradeoff) --

    def measure(self, request: Dict[str, Any]) -> Dict[str, Any]:
        """The `measure` request (PROTOCOL.md): a case's timed steps and memory figures, or the
        device's bf16 matmul rate. Nothing is judged; the case's data is made here."""
        rid = request.get("id")
        what = request.get("what", "case")
        t0 = time.perf_counter()
        if what == "matmul-bf16":
            rate, why = self.matmul_bf16_tflops()
            return replies.measurement_of_matmul(rid, rate, why, t0)
        if what != "case":
            raise RequestError(f"measure: unknown 'what' {what!r} (case, matmul-bf16)")
        if "case" not in request:
            raise RequestError("measure: missing 'case'")
        try:
            c = case_mod.parse_case(request["case"], extension_styles=case_mod.EXTENSION_STYLES)
        except case_mod.CaseError as e:
            raise RequestError(f"case: {e}") from None
        reason = self.why_skipped(c)
        if reason:
            return replies.measurement_skipped(rid, reason, t0)
        run_case = self.measured_case(c)
        runner = None
        # where a measurement's time goes (recap tradeoff prints it): the step times are a
        # fraction of it at a large size, and the rest decides how many configurations a call holds
        ms: Dict[str, float] = {}
        reply: Optional[Dict[str, Any]] = None
        t = time.perf_counter()

        def lap(key: str) -> None:
            nonlocal t
            now = time.perf_counter()
            ms[key] = (now - t) * 1e3
            t = now

        try:
            try:
                data = synthetic_run_data(run_case, self.device)
                lap("data_ms")
                runner = self.make_runner(run_case, data)
                del data
                lap("model_build_ms")
            except BuildFailure as e:
                lap("model_build_ms")  # the build that failed, not the cleanup's time
                rec = build_failure_record(run_case, e)
                reply = replies.measurement(rid, rec, None, c.replays, self.device, t0)
                return reply
            except SkipCase as e:
                lap("model_build_ms")
                reply = replies.measurement_skipped(rid, str(e), t0)
                return reply
            runner.measuring = True
            runner.obs.record = False
            rec = runner.run()
            lap("run_ms")
            reply = replies.measurement(rid, rec, runner, c.replays, self.device, t0)
            return reply
        finally:
            del runner
            self.between_cases()
            self.after_case(c)
            lap("cleanup_ms")
            if reply is not None:  # the same dict the return hands on: stamped after the cleanup
                reply["timings"]["profile"] = ms
                reply["timings"]["run_ms"] = (time.perf_counter() - t0) * 1e3

    def matmul_bf16_tflops(self) -> Tuple[Optional[float], str]:
        """A bf16 GEMM of 8192 x 8192 x 8192 timed by CUDA events over 10 launches after 3: the
        device's rate in TFLOP/s; (None, why) on the CPU."""
        if self.device.type != "cuda":
            return None, f"no GPU: this worker runs on {self.device_name()}"
        n = 8192
        g = torch.Generator(device=self.device)
        g.manual_seed(0)
        a = torch.randn((n, n), generator=g, device=self.device, dtype=torch.bfloat16)
        b = torch.randn((n, n), generator=g, device=self.device, dtype=torch.bfloat16)
        out = torch.empty((n, n), device=self.device, dtype=torch.bfloat16)
        for _ in range(3):
            torch.mm(a, b, out=out)
        torch.cuda.synchronize(self.device)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        iters = 10
        start.record()
        for _ in range(iters):
            torch.mm(a, b, out=out)
        end.record()
        end.synchronize()
        ms = float(start.elapsed_time(end))
        del a, b, out
        torch.cuda.empty_cache()
        return 2.0 * n * n * n * iters / (ms * 1e-3) / 1e12, ""

    def execute(self, c: case_mod.Case, data: RunData, prof: Optional[Profile] = None) -> RunRecord:
        runner = None
        try:
            try:
                with phase(prof, "model_build_ms"):
                    runner = self.make_runner(c, data)
                    if prof is not None and self.device.type == "cuda":
                        torch.cuda.synchronize()  # profiling only: the build owns its uploads
            except BuildFailure as e:
                return build_failure_record(c, e)
            runner.prof = prof
            rec = runner.run()
            if rec.failure is not None and rec.failure.get("error") in OUT_OF_MEMORY:
                # the allocator ran out: what it holds, and the framework's state after a step cut
                # short, are unknown; a fresh worker serves the next case (PROTOCOL.md, `retire`)
                self.retire = True
            return rec
        finally:
            del runner
            with phase(prof, "cleanup_ms"):
                self.between_cases()
                self.after_case(c)

    def after_case(self, c: case_mod.Case) -> None:
        """Frees what the case left and says on stderr when memory stays held (a leak)."""
        collect_between_cases()
        if self.device.type == "cuda":
            try:
                torch.cuda.synchronize()
                self._clear_cublas_workspaces()
                trace = bool(os.environ.get("RECAP_MEMORY_TRACE"))
                stray = release_stray_graphs(trace)
                torch.cuda.empty_cache()
                # a graph's pool keeps its segments reserved with nothing allocated in them: judge both
                held = max(torch.cuda.memory_allocated(self.device) - self.base_allocated,
                           torch.cuda.memory_reserved(self.device) - self.base_reserved)
                if held > (64 << 20):  # a leak across cases: on stderr, the campaign log keeps it
                    print(f"recap_drivers: {held >> 20} MiB still allocated or reserved after case {c.name!r}",
                          file=sys.stderr, flush=True)
                    leak_report(held)
                self.held_after = int(held)
                self.retire = self.retire or (self.retire_bytes > 0 and held > self.retire_bytes)
                if trace:
                    memory_trace(self.device, c.name, held, stray)
                    torch.cuda.reset_peak_memory_stats(self.device)  # the next line's peak is its case's
            except Exception as e:  # never silent: a failing check here hid a leak once
                print(f"recap_drivers: after case {c.name!r}: {type(e).__name__}: {e}"[:300],
                      file=sys.stderr, flush=True)
                self.retire = True  # the process's state is unknown: start a fresh one
