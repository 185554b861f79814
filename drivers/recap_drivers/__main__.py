"""recap-driver (or python3 -m recap_drivers) --sut torch|megatron [--device cpu|cuda|auto] [--expect-version V]

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


def main(argv: Optional[List[str]] = None) -> int:
    # Before torch (and CUDA) initialize: deterministic cuBLAS needs a fixed workspace.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    ap = argparse.ArgumentParser(prog="recap-driver", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sut", required=True, choices=SUTS, help="system under test")
    ap.add_argument("--device", default="auto", choices=("cpu", "cuda", "auto"))
    ap.add_argument("--expect-version", default="",
                    help="refuse to start (exit 2) unless the framework's version is this one "
                         "(megatron: megatron-core's, exactly; torch: a prefix of torch.__version__)")
    args = ap.parse_args(argv)

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
