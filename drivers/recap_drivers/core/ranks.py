"""Rank groups (PROTOCOL.md, "Rank groups"): `python3 -m recap_drivers --sut torch --ranks N` is one
worker made of N ranks of one torch.distributed group. Rank 0 is the process recap started: it
alone reads requests (stdin) and writes replies (stdout); it sends each request, header and
frames, to the other ranks, runs it itself, gathers every rank's observation and replies once.

Launcher. The leader starts ranks 1 .. N-1 itself (subprocess, `--rank r`), not with
torch.distributed.run: torchrun puts its elastic agent between recap and the ranks (recap's stdin
and stdout would belong to the agent, or be inherited by every rank), and on a rank's death the
agent tears the group down and exits, so no rank could answer recap with the reason. Started here,
each rank gets the environment torchrun would give it (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT) and joins through a TCPStore the leader opened on a free port (port 0: no race for
the port); ranks die with the leader (die_with_parent) and are in its process group (recap's kill
of the group reaches them).

Request and reply paths. Requests go to every rank over its stdin pipe as the same bytes; each
rank answers on its stdout pipe with its own observation (core.worker.serve, unchanged). The
pipes, not collectives, carry the control traffic, so the leader never blocks in a collective
waiting for a dead rank: its own rank runs in a thread while the main thread watches the others.
Only the model's tensor-parallel collectives use the process group (gloo on the CPU, nccl on CUDA).

A lost rank. A rank that exits (a crash, SIGKILL) before answering, or that answers nothing within
RECAP_RANK_TIMEOUT_S seconds (default 120) of the first rank's answer, ends the group: the leader
kills the other ranks, writes `{"op":"error","id":..,"message":"rank 1 died of signal 9 (SIGKILL)
during request 7; ..."}` (one line, naming the rank) and exits with status 3. recap treats an
error reply to a run as a crashed case and starts a new worker. The same timeout bounds each
collective (the process group's timeout), so a rank stuck in a collective whose peer hangs
fails its run rather than waiting for ever. Ranks whose runs failed differently (their collectives
may be out of step) give a `failed` observation with `fatal: true`, and the group exits 3 after it.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from .. import case as case_mod
from .errors import GroupLost, RequestError
from .protocol import Frame, encode_message, read_message
from .rank_args import TIMEOUT_ENV

STORE_ENV = "RECAP_RANK_STORE"  # host:port of the leader's TCPStore, for ranks 1 .. N-1


def backend_for(device: torch.device, world: int) -> str:
    """gloo on the CPU; on CUDA nccl with a GPU per rank, else gloo over CUDA tensors (the ranks
    share the GPUs, rank r on GPU r % count, and NCCL refuses two ranks on one GPU): that runs the
    ranks' CUDA paths on a machine of fewer GPUs than ranks, not NCCL."""
    if device.type != "cuda":
        return "gloo"
    return "nccl" if torch.cuda.device_count() >= world else "gloo"


def how_it_ended(code: Optional[int]) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"died of signal {-code} ({name})"
    return f"exited with status {code}"


def _init_group(backend: str, store: Any, rank: int, world: int, timeout: float) -> None:
    dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))


def child_init(rank: int, world: int, device: torch.device, timeout: float) -> None:
    """Ranks 1 .. N-1: join the leader's group (STORE_ENV) before serving."""
    host, _, port = os.environ.get(STORE_ENV, "").rpartition(":")
    if not host or not port.isdigit():
        raise RuntimeError(f"rank {rank}: {STORE_ENV} is not host:port")
    store = dist.TCPStore(host, int(port), world, False, timeout=datetime.timedelta(seconds=timeout))
    _init_group(backend_for(device, world), store, rank, world, timeout)


class Group:
    """The leader's view of ranks 1 .. N-1: their processes and pipes."""

    def __init__(self, world: int, child_argv: Callable[[int], List[str]], device: torch.device, timeout: float) -> None:
        self.world, self.timeout, self.device = world, timeout, device
        store = dist.TCPStore("127.0.0.1", 0, world, True, timeout=datetime.timedelta(seconds=timeout),
                              wait_for_workers=False)
        self.children: List[Any] = []
        for r in range(1, world):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port), **{STORE_ENV: f"127.0.0.1:{store.port}"})
            # stdin and stdout: the leader's pipes; stderr: the worker's, so recap quotes a rank's traceback
            self.children.append(subprocess.Popen(child_argv(r), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                  env=env))
        # the leader joins in a thread, so that a rank that dies before joining is seen at once
        failed: List[BaseException] = []

        def join() -> None:
            try:
                _init_group(backend_for(device, world), store, 0, world, timeout)
            except BaseException as e:  # noqa: B902 - reported by the waiting thread
                failed.append(e)

        t = threading.Thread(target=join, name="recap-rank0-join", daemon=True)
        t.start()
        self.store = store
        while t.is_alive():
            t.join(0.1)
            for r, ch in enumerate(self.children, start=1):
                if ch.poll() is not None:
                    self.kill()
                    raise RuntimeError(f"rank {r} {how_it_ended(ch.returncode)} before joining the group")
        if failed:
            self.kill()
            raise RuntimeError(f"rank 0 could not join the group: {failed[0]}")

    def kill(self) -> None:
        for ch in self.children:
            if ch.poll() is None:
                ch.kill()
        for ch in self.children:
            try:
                ch.wait(10)
            except Exception:
                pass


class GroupSUT:
    """The SUT core.worker.serve sees in the leader: `local` is rank 0's SUT (a framework SUT whose
    run also adds `rank_shards` and `rank_tp_sites` to its reply)."""

    def __init__(self, local: Any, group: Group) -> None:
        self.local = local
        self.group = group
        self.world = group.world
        self.retire = False

    def hello(self) -> Dict[str, Any]:
        h = dict(self.local.hello())  # rank 0's: its capabilities list the group's tp, pp and sp
        h["ranks"] = self.world
        h.pop("ops", None)  # measure is not served by a rank group (yet): a client then asks for none
        return h

    def run(self, header: Dict[str, Any], frames: List[Frame]) -> Tuple[Dict[str, Any], List[Frame]]:
        rid = header.get("id")
        pp = header.get("pp", 1)
        if isinstance(pp, bool) or not isinstance(pp, int) or pp < 1:
            raise RequestError(f"pp: expected a positive integer, got {pp!r}")
        dp = header.get("dp", 1)
        if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
            raise RequestError(f"dp: expected a positive integer, got {dp!r}")
        tp = header.get("tp", self.world // (pp * dp) if self.world % (pp * dp) == 0 else self.world)
        if isinstance(tp, bool) or not isinstance(tp, int) or tp * pp * dp != self.world:
            raise RequestError(f"tp {tp!r} with pp {pp} and dp {dp}: this rank group of {self.world} ranks (its "
                               "--ranks) runs tp * pp * dp == its ranks")
        data = encode_message(header, frames)
        for r, ch in enumerate(self.group.children, start=1):
            try:
                ch.stdin.write(data)
                ch.stdin.flush()
            except (BrokenPipeError, OSError):
                self._lost(r, rid, "")
        results: Dict[int, Tuple[str, Any]] = {}
        ev = threading.Event()

        def local() -> None:
            try:
                results[0] = ("reply", self.local.run(header, frames))
            except BaseException as e:  # noqa: B902 - answered below, as serve would
                results[0] = ("raise", e)
            finally:
                ev.set()

        def reader(r: int, ch: Any) -> None:
            try:
                msg = read_message(ch.stdout)
                results[r] = ("reply", msg) if msg is not None else ("eof", "")
            except Exception as e:
                results[r] = ("eof", f": {e}")
            finally:
                ev.set()

        threads = [threading.Thread(target=local, name="recap-rank0", daemon=True)]
        threads += [threading.Thread(target=reader, args=(r, ch), name=f"recap-rank{r}-reader", daemon=True)
                    for r, ch in enumerate(self.group.children, start=1)]
        for t in threads:
            t.start()
        first_answer: Optional[float] = None
        while len(results) < self.world:
            ev.wait(0.1)
            ev.clear()
            for r, ch in enumerate(self.group.children, start=1):
                if r in results and results[r][0] == "eof":
                    if ch.poll() is None:  # its output closed: it is ending, let it say how
                        try:
                            ch.wait(10)
                        except subprocess.TimeoutExpired:
                            pass
                    self._lost(r, rid, results[r][1])
                if r not in results and ch.poll() is not None:
                    threads[r].join(5)  # what it wrote before it ended is still read
                    if r not in results or results[r][0] == "eof":
                        self._lost(r, rid, "")
            if results and first_answer is None:
                first_answer = time.monotonic()
            if first_answer is not None and time.monotonic() - first_answer > self.group.timeout:
                missing = min(r for r in range(self.world) if r not in results)
                self._lost(missing, rid, "", f"answered nothing within {TIMEOUT_ENV} {self.group.timeout:g} s of "
                                             f"rank {min(results)}'s answer")
        return self._answer(header, results)

    def _lost(self, r: int, rid: Any, detail: str, how: str = "") -> None:
        ch = self.group.children[r - 1] if r >= 1 else None
        if not how:
            how = how_it_ended(ch.poll() if ch is not None else None)
        self.group.kill()
        raise GroupLost(f"rank {r} {how} during request {rid}{detail}; the rank group cannot continue")

    def _answer(self, header: Dict[str, Any], results: Dict[int, Tuple[str, Any]]) -> Tuple[Dict[str, Any], List[Frame]]:
        rid = header.get("id")
        kinds = []
        for r in range(self.world):
            kind, val = results[r]
            kinds.append("observation" if kind == "reply" and val[0].get("op") == "observation" else
                         ("error" if kind == "reply" else "raise"))
        if all(k != "observation" for k in kinds):
            kind, val = results[0]
            if kind == "raise":
                raise val  # serve answers it as it would a one-rank worker's
            raise RequestError(val[0].get("message", "error"))
        if any(k != "observation" for k in kinds):
            what = "; ".join(f"rank {r}: " + (kinds[r] if kinds[r] != "error" else
                                              "error " + results[r][1][0].get("message", "")) for r in range(self.world))
            raise GroupLost(f"ranks disagree on request {rid} ({what})")
        try:
            c = case_mod.parse_case(header["case"], extension_styles=case_mod.EXTENSION_STYLES)
        except case_mod.CaseError as e:  # the ranks accepted it: cannot happen, but never silently
            raise RequestError(f"case: {e}") from None
        return merge([results[r][1] for r in range(self.world)], [tuple(p.shape) for p in case_mod.param_infos(c)],
                     backend_for(self.group.device, self.world))


# -- the gathered observation --

RANK_KEYS = ("rank_shards", "rank_tp_sites", "rank_pp", "rank_sp", "rank_dp")


def _tensor(f: Frame) -> torch.Tensor:
    dt = torch.float32 if f.dtype == "f32" else torch.uint8
    if f.numel == 0:
        return torch.zeros(f.shape, dtype=dt)
    return torch.frombuffer(bytearray(f.data), dtype=dt).reshape(f.shape)


def assemble(shards: List[Frame], entry: Dict[str, Any], shape: Tuple[int, ...], name: str) -> Frame:
    """The full tensor of a parameter from every rank's shard (entry: its `shards` row); a
    replicated parameter is rank 0's."""
    dim = entry.get("dim")
    if dim is None:
        return Frame(name, "f32", tuple(shards[0].shape), shards[0].data)
    full = torch.empty(shape, dtype=torch.float32)
    covered = 0
    for f, ranges in zip(shards, entry["ranges"]):
        t = _tensor(f)
        off = 0
        for a, b in ranges:
            full.narrow(dim, a, b - a).copy_(t.narrow(dim, off, b - a))
            off += b - a
            covered += b - a
        if off != t.shape[dim]:
            raise RuntimeError(f"{name}: a shard of {t.shape[dim]} along dim {dim} is described by ranges of {off}")
    if covered != shape[dim]:
        raise RuntimeError(f"{name}: the ranks' ranges cover {covered} of {shape[dim]} along dim {dim}")
    return Frame(name, "f32", tuple(shape), full.contiguous().numpy().tobytes())


def _statuses(base: Dict[str, Any], hs: List[Dict[str, Any]]) -> None:
    """The group's status, failure and fatal from every rank's."""
    world = len(hs)
    statuses = [h.get("status") for h in hs]
    failed = [r for r in range(world) if statuses[r] == "failed"]
    if failed:
        r0 = failed[0]
        base["status"] = "failed"
        base["failure"] = dict(hs[r0]["failure"], rank=r0)
        base["reason"] = f"rank {r0}: {hs[r0].get('reason', '')}"
        if len(set(_failure_key(h) for h in hs)) > 1:  # ranks stopped at different points
            base["fatal"] = True
    elif len(set(statuses)) > 1:
        base["status"] = "failed"
        base["reason"] = "ranks disagree: " + ", ".join(f"rank {r} {s}" for r, s in enumerate(statuses))
        base["fatal"] = True
    if any(h.get("fatal") for h in hs):
        base["fatal"] = True


def _events(p: Dict[str, Any], step: int) -> List[Any]:
    """A stage's events of a step (its keys are ints on rank 0, strings once through a pipe)."""
    sch = p.get("schedule", {})
    return list(sch.get(step, sch.get(str(step), [])))


def _no_nan(losses: List[Any]) -> List[Any]:
    """A stage that computes no loss reports none (null), not NaN."""
    return [None if isinstance(x, float) and x != x else x for x in losses]


def globalize(h: Dict[str, Any], frames: List[Frame]) -> Tuple[Dict[str, Any], List[Frame]]:
    """A data-parallel replica's reply (its `rank_dp`) with its microbatches numbered as the step's:
    local microbatch j of replica d is the step's d * k + j (k = its microbatches). Its losses list
    the step's M microbatches, null where another replica ran them; its masks, schedule events and
    frame names carry the step's numbers. A reply without `rank_dp` is returned as it is."""
    dpi = h.get("rank_dp")
    if not dpi:
        return h, frames
    k, d, dp = int(dpi["microbatches"]), int(dpi["replica"]), int(dpi["dp"])
    off = d * k
    h = dict(h)
    steps = []
    for st in h.get("steps", []):
        st = dict(st)
        losses: List[Any] = [None] * (k * dp)
        for j, x in enumerate(st.get("losses", [])):
            losses[off + j] = x
        st["losses"] = losses
        st["masks"] = [dict(m, microbatch=int(m["microbatch"]) + off) for m in st.get("masks", [])]
        steps.append(st)
    h["steps"] = steps
    if "rank_pp" in h:
        pp = dict(h["rank_pp"])
        pp["schedule"] = {step: [[e[0], int(e[1]) + off] + list(e[2:]) for e in events]
                          for step, events in pp.get("schedule", {}).items()}
        h["rank_pp"] = pp
    out = []
    for f in frames:
        w = f.name.split(" ")
        if (w[0] == "grad" and len(w) == 4) or w[0] == "mask":  # grad s j i, mask s j pass layer op index
            w[2] = str(int(w[2]) + off)
            f = Frame(" ".join(w), f.dtype, f.shape, f.data)
        out.append(f)
    return h, out


def _microbatches(fr: Dict[str, Frame], s: int) -> List[int]:
    """The microbatches of step s whose gradients a rank sent."""
    return sorted({int(name.split()[2]) for name in fr if name.startswith(f"grad {s} ") and len(name.split()) == 4})


def _losses(hs: List[Dict[str, Any]], ranks: List[int], k: int) -> List[Any]:
    """Step k's losses of the step's microbatches, each from the first of `ranks` that computed it."""
    out: List[Any] = []
    for r in ranks:
        for m, x in enumerate(hs[r]["steps"][k].get("losses", [])):
            if m >= len(out):
                out.append(None)
            if out[m] is None and x is not None and not (isinstance(x, float) and x != x):
                out[m] = x
    return [float("nan") if x is None else x for x in out]


def merge_pp(base: Dict[str, Any], hs: List[Dict[str, Any]], fr: List[Dict[str, Frame]],
             shapes: List[Tuple[int, ...]], reps: List[int]) -> Tuple[Dict[str, Any], List[Frame]]:
    """A pipeline group's observation (PROTOCOL.md, "Rank groups"): rank r ran stage r // (tp * dp)'s
    layers (tp 1, dp 1: stage r's), of each of its vp model chunks. `ranks` adds pp, vp, stages (every
    rank's stage) and stage_layers (every virtual stage's, chunk * pp + stage, as its ranks built it); the
    step's masks are every replica's stages' in stage order (each layer's from the stage's first rank)
    and its losses the last stages'; every rank row has its own masks, losses (null where the stage
    computes none) and schedule (its forward and backward events in the order they ran); each
    parameter's full frames are assembled from its stage's ranks' shards (tp 1: the stage's rank's),
    a microbatch's from its replica's, and a rank sends `@<r>` gradient frames of its stage's
    parameters only."""
    world = len(hs)
    pps = [h.get("rank_pp") or {} for h in hs]
    r0 = pps[0]
    tp, pp, vp = int(r0.get("tp", 1)), int(r0.get("pp", world)), int(r0.get("vp", 1))
    stages = [int(p.get("stage", r)) for r, p in enumerate(pps)]
    stage_layers: List[Any] = [None] * (pp * vp)
    for p, stage in zip(pps, stages):
        for chunk, span in enumerate(p.get("chunk_layers", [])):
            if 0 <= chunk * pp + stage < pp * vp:
                stage_layers[chunk * pp + stage] = span
    owners: Dict[Tuple[int, int], List[int]] = {}  # per (parameter, replica): its stage's ranks, in tp rank order
    for r, p in enumerate(pps):
        for i in p.get("params", []):
            owners.setdefault((int(i), reps[r]), []).append(r)
    shards = hs[0].get("rank_shards") or [{"param": i, "dim": None, "ranges": []} for i in range(len(shapes))]
    by_param = {e["param"]: e for e in shards}
    base["ranks"].update({"tp": tp, "pp": pp, "vp": vp, "stages": stages, "stage_layers": stage_layers,
                          "shards": shards})
    _statuses(base, hs)
    last = [max((r for r in range(world) if reps[r] == d), key=lambda r: stages[r]) for d in sorted(set(reps))]
    n = min(len(h.get("steps", [])) for h in hs)
    steps = []
    out: List[Frame] = []
    by_stage = sorted((r for r in range(world) if r % tp == 0), key=lambda r: (reps[r], stages[r]))

    def full(i: int, name: str, d: int) -> Frame:
        rs = owners.get((i, d), [0])
        return assemble([fr[r][name] for r in rs], by_param.get(i, {"dim": None}), shapes[i], name)

    for k in range(n):
        st = dict(hs[last[0]]["steps"][k])
        st["losses"] = _losses(hs, last, k)
        st["masks"] = [m for r in by_stage for m in hs[r]["steps"][k]["masks"]]
        s = st["step"]
        st["ranks"] = [{"rank": r, "stage": stages[r], "losses": _no_nan(hs[r]["steps"][k]["losses"]),
                        "masks": hs[r]["steps"][k]["masks"],
                        "schedule": [list(e) for e in _events(pps[r], s)]}
                       for r in range(world)]
        steps.append(st)
        mine = [_microbatches(fr[r], s) for r in range(world)]
        replica_of = {m: reps[r] for r in range(world) for m in mine[r]}
        for m in sorted(replica_of):
            for i in range(len(shapes)):
                out.append(full(i, f"grad {s} {m} {i}", replica_of[m]))
        for what in ("grad", "param"):
            for i in range(len(shapes)):
                name = f"{what} {s} {i}"
                if name in fr[0]:
                    out.append(full(i, name, 0))
        for r in range(world):
            out += _own_frames(fr[r], r, s, mine[r], [int(i) for i in pps[r].get("params", [])], reps != [0] * world)
    base["steps"] = steps
    return base, out


def _own_frames(fr: Dict[str, Frame], r: int, s: int, mbs: List[int], params: List[int],
                reduced: bool = False) -> List[Frame]:
    """Rank r's own per-microbatch gradients of params and its masks of step s, named ` @<r>`; with
    data-parallel replicas (`reduced`) also its step gradients, summed over its replicas."""
    out = []
    for m in mbs:
        for i in params:
            f = fr[f"grad {s} {m} {i}"]
            out.append(Frame(f"{f.name} @{r}", f.dtype, f.shape, f.data))
    if reduced:
        for i in params:
            f = fr[f"grad {s} {i}"]
            out.append(Frame(f"{f.name} @{r}", f.dtype, f.shape, f.data))
    for name, f in fr.items():
        if name.startswith(f"mask {s} "):
            out.append(Frame(f"{name} @{r}", f.dtype, f.shape, f.data))
    return out


def _failure_key(h: Dict[str, Any]) -> Any:
    f = h.get("failure")
    if f is None:
        return None
    return (f.get("phase"), f.get("pass"), f.get("layer"), f.get("microbatch"), f.get("step"), f.get("error"))


def merge(replies: List[Tuple[Dict[str, Any], List[Frame]]], shapes: List[Tuple[int, ...]],
          backend: str) -> Tuple[Dict[str, Any], List[Frame]]:
    """One observation of the group from every rank's (PROTOCOL.md, "Rank groups"): rank 0's
    header, `ranks` (world, shards, tp_sites; with dp replicas dp and every rank's replica),
    `steps[].ranks` (every rank's losses and masks), full-shape gradient and parameter frames
    assembled from the shards (a microbatch's from the ranks of its replica), and every rank's own
    gradient and mask frames named with ` @<rank>`."""
    world = len(replies)
    replies = [globalize(h, frames) for h, frames in replies]
    hs = [h for h, _ in replies]
    fr = [{f.name: f for f in frames} for _, frames in replies]
    reps = [int((h.get("rank_dp") or {}).get("replica", 0)) for h in hs]
    dp = int((hs[0].get("rank_dp") or {}).get("dp", 1))
    base = {k: v for k, v in hs[0].items() if k not in RANK_KEYS and k != "frames"}
    shards = hs[0].get("rank_shards", [])
    base["ranks"] = {"world": world, "tp": world // dp, "backend": backend, "shards": shards,
                     "tp_sites": list(hs[0].get("rank_tp_sites", []))}
    if dp > 1:
        base["ranks"].update({"dp": dp, "replicas": reps})
    if hs[0].get("rank_sp"):
        base["ranks"]["sp"] = True
    if any("rank_pp" in h for h in hs):
        return merge_pp(base, hs, fr, shapes, reps)
    _statuses(base, hs)
    n = min(len(h.get("steps", [])) for h in hs)
    steps = []
    out: List[Frame] = []
    by_param = {e["param"]: e for e in shards}
    firsts = [min(r for r in range(world) if reps[r] == d) for d in range(dp)]  # each replica's first rank
    of_replica = [[r for r in range(world) if reps[r] == d] for d in range(dp)]
    for k in range(n):
        st = dict(hs[0]["steps"][k])
        st["losses"] = _losses(hs, firsts, k)
        st["masks"] = [m for r in firsts for m in hs[r]["steps"][k]["masks"]]
        st["ranks"] = [{"rank": r, "losses": hs[r]["steps"][k]["losses"], "masks": hs[r]["steps"][k]["masks"]}
                       for r in range(world)]
        steps.append(st)
        s = st["step"]
        mine = [_microbatches(fr[r], s) for r in range(world)]
        replica_of = {m: reps[r] for r in range(world) for m in mine[r]}
        for m in sorted(replica_of):
            rs = of_replica[replica_of[m]]
            for i, shape in enumerate(shapes):
                name = f"grad {s} {m} {i}"
                out.append(assemble([fr[r][name] for r in rs], by_param.get(i, {"dim": None}), shape, name))
        for what in ("grad", "param"):
            for i, shape in enumerate(shapes):
                name = f"{what} {s} {i}"
                if name in fr[0]:
                    out.append(assemble([fr[r][name] for r in of_replica[0]], by_param.get(i, {"dim": None}), shape,
                                        name))
        for r in range(world):
            out += _own_frames(fr[r], r, s, mine[r], list(range(len(shapes))), dp > 1)
    base["steps"] = steps
    return base, out


def child_argv(world: int, device: str, sut: str = "torch") -> Callable[[int], List[str]]:
    """The command of rank r: this package again, as a rank of the group."""
    def argv(r: int) -> List[str]:
        return [sys.executable, "-m", "recap_drivers", "--sut", sut, "--device", device, "--ranks", str(world),
                "--rank", str(r)]
    return argv


__all__ = ["GroupSUT", "Group", "assemble", "child_argv", "child_init", "merge"]
