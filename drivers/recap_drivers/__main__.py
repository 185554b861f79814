"""recap-driver (or python3 -m recap_drivers) --sut torch|megatron [--device cpu|cuda|auto] [--expect-version V] [--ranks N]

A recap.worker/1 worker: requests on stdin, replies on stdout (nothing else is ever written
there), free text on stderr. See PROTOCOL.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

# Nothing here imports torch or a framework before the arguments are read: --help works without
# them, and a worker imports only the framework it serves.

SUTS = ("torch", "megatron")


def installed(sut: str) -> Tuple[str, Optional[str]]:
    """The framework's distribution name and the version a worker would import (None: none),
    read without importing it (seconds for megatron-core)."""
    if sut == "megatron":
        from .frameworks.megatron.version import installed_version

        return "megatron-core", installed_version()
    from importlib.metadata import PackageNotFoundError, version

    try:
        return "torch", version("torch")
    except PackageNotFoundError:
        return "torch", None


def make_rank(world: int, rank: int, device: str, sut: str, expect_version: str) -> Any:
    """A rank group's SUT: the leader's (rank < 0: it starts the other ranks) or rank r's."""
    import torch

    from .core.rank_args import parse_timeout
    from .core.ranks import Group, GroupSUT, child_argv, child_init

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and torch.cuda.is_available():
        # a GPU per rank (LOCAL_RANK); fewer GPUs than ranks: shared (core/ranks.py backend_for: gloo)
        torch.cuda.set_device(max(rank, 0) % torch.cuda.device_count())
    timeout, _ = parse_timeout()
    dev = torch.device(device)

    def local(r: int) -> Any:
        if sut == "megatron":
            from .frameworks.megatron.ranks import MegatronRankSUT

            return MegatronRankSUT(device, r, world, expect_version or None)
        from .frameworks.torch.tensor_parallel import TorchRankSUT

        return TorchRankSUT(device, r, world)

    if rank > 0:
        child_init(rank, world, dev, timeout)
        return local(rank)
    group = Group(world, child_argv(world, device, sut), dev, timeout)
    try:
        return GroupSUT(local(0), group)
    except BaseException:
        group.kill()  # rank 0 could not start: its ranks must not outlive it
        raise


def main(argv: Optional[List[str]] = None) -> int:
    # Before torch (and CUDA) initialize: deterministic cuBLAS needs a fixed workspace.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    ap = argparse.ArgumentParser(prog="recap-driver", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sut", required=True, choices=SUTS, help="system under test")
    ap.add_argument("--device", default="auto", choices=("cpu", "cuda", "auto"))
    ap.add_argument("--expect-version", default="",
                    help="refuse to start (exit 2) unless the framework's version is this one "
                         "(megatron: megatron-core's, exactly; torch: a prefix of torch.__version__)")
    ap.add_argument("--ranks", default="",
                    help="a rank group of N >= 2 ranks (PROTOCOL.md, 'Rank groups')")
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)  # a rank the leader started
    args = ap.parse_args(argv)
    world = 0
    if args.ranks or args.rank >= 0:
        from .core import rank_faults
        from .core.rank_args import parse_ranks, parse_timeout

        world, problem = parse_ranks(args.ranks) if args.ranks else (0, "--rank needs --ranks")
        if not problem and args.rank >= world:
            problem = f"--rank {args.rank}: expected 1 .. {world - 1}"
        problem = problem or parse_timeout()[1] or rank_faults.PROBLEM
        if problem:
            print(f"recap_drivers: {problem}", file=sys.stderr)
            return 2

    from .core.protocol import guard_stdout
    from .core.worker import check_version, serve

    out = guard_stdout()
    inp = sys.stdin.buffer

    # The megatron driver's graph-safe recompute option (frameworks/megatron/graph_safe_recompute.py).
    if args.sut == "megatron":
        from .frameworks.megatron.version import recompute_requested

        _, problem = recompute_requested()
        if problem:
            print(f"recap_drivers: {problem}", file=sys.stderr)
            return 2
    problem = check_version(*installed(args.sut), args.expect_version)
    if problem:
        print(f"recap_drivers: {problem}", file=sys.stderr)
        return 2
    # A framework mutant (mutants/): named once, here; unset, nothing is imported or patched.
    from . import mutants

    mutant, problem = mutants.requested(args.sut)
    if problem:
        print(f"recap_drivers: {problem}", file=sys.stderr)
        return 2
    # Planted worker faults (core/worker_faults.py): a bad RECAP_WORKER_FAULT is refused here.
    from .core import worker_faults

    if worker_faults.PROBLEM:
        print(f"recap_drivers: {worker_faults.PROBLEM}", file=sys.stderr)
        return 2

    def make() -> Any:
        if world:
            return make_rank(world, args.rank, args.device, args.sut, args.expect_version)
        if args.sut == "megatron":
            from .frameworks.megatron.sut import MegatronSUT

            return MegatronSUT(args.device)
        from .frameworks.torch.sut import TorchSUT

        return TorchSUT(args.device)

    def factory() -> Any:
        s = make()
        if mutant is not None:
            mutants.install(mutant)  # after the framework is imported, before the first case
        plain = s.hello

        def hello() -> Dict[str, Any]:  # the hello lists this SUT's mutants and which this worker can fire
            h = plain()
            h["mutants"] = mutants.listing(args.sut, h.get("capabilities", {}), h.get("device", ""))
            return h

        s.hello = hello
        return s

    if args.rank > 0:
        # a rank the leader started joins the group now: the leader waits for every rank before
        # it answers anything (core/ranks.py)
        try:
            rank_sut = factory()
        except Exception as e:
            print(f"recap_drivers: rank {args.rank}: cannot start: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        factory = lambda: rank_sut  # noqa: E731
    try:
        return serve(factory, inp, out)
    except BrokenPipeError:
        return 0
    finally:
        try:
            out.flush()
        except Exception:
            pass


def entry() -> None:
    """The console script recap-driver, as python3 -m recap_drivers runs."""
    code = main()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown (CUDA graphs, threads): the replies are flushed


if __name__ == "__main__":
    entry()
