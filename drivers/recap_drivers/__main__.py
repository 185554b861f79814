"""python3 -m recap_drivers --sut torch [--device cpu|cuda|auto]

A recap.worker/1 worker: requests on stdin, replies on stdout (nothing else is ever written
there), free text on stderr. See PROTOCOL.md.
"""

from __future__ import annotations

import argparse
import os
import sys

SUTS = ("torch", "megatron")


def main(argv=None) -> int:
    # Before torch (and CUDA) initialize: deterministic cuBLAS needs a fixed workspace.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    ap = argparse.ArgumentParser(prog="python3 -m recap_drivers", description=__doc__.splitlines()[0])
    ap.add_argument("--sut", required=True, choices=SUTS, help="system under test")
    ap.add_argument("--device", default="auto", choices=("cpu", "cuda", "auto"))
    args = ap.parse_args(argv)

    from .protocol import guard_stdout
    from .worker import NotBuiltSUT, serve

    out = guard_stdout()
    inp = sys.stdin.buffer

    if args.sut == "megatron":
        factory = lambda: NotBuiltSUT("megatron")  # noqa: E731
    else:
        def factory():
            from .torch_sut import TorchSUT

            return TorchSUT(args.device)

    try:
        return serve(factory, inp, out)
    except BrokenPipeError:
        return 0
    finally:
        try:
            out.flush()
        except Exception:
            pass


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown (CUDA graphs, threads): the replies are flushed
