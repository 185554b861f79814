"""M8, megatron-core only: FullCudaGraphWrapper's StaticBufferLoader copies a microbatch into its
static buffer on a side stream that does not wait for the current stream (megatron/core/
full_cuda_graph.py, StaticBufferLoader.__call__; 0.15.3 and 0.16.1). A batch written on the current
stream behind queued work (the previous step's tail, as in any training loop) is read before it is
written: the step trains on the previous batch. PR #3429 added `self.stream.wait_stream(...)`.

Usage: python m8_repro.py   (one GPU; exit 0 = the buffer holds the new batch, 1 = stale)
"""
import sys

import torch
import megatron.core
from megatron.core.full_cuda_graph import StaticBufferLoader

N = 1 << 20
SLEEP_CYCLES = 200_000_000  # about 0.1 s of queued work on the current stream


def stale_elements(first_call: bool) -> int:
    """Writes the batch (ones) on the current stream behind queued work, loads it into the static
    buffer, and counts the buffer's elements that are not the batch's."""
    StaticBufferLoader.static_buffers = {"training": [], "validation": []}
    loader = StaticBufferLoader()
    x = torch.zeros(N, device="cuda")
    if not first_call:  # step 0 made the buffer; step 1 refills it (the `else` branch)
        loader({"x": x}, "training", 0)
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)  # the previous step's tail, still running
    x.fill_(1.0)  # the next batch, on the current stream
    buf = loader({"x": x}, "training", 0)["x"]
    torch.cuda.synchronize()
    return int((buf != 1.0).sum())


def main() -> int:
    bad = 0
    for first in (True, False):
        n = stale_elements(first)
        what = "step 0 (new buffer)" if first else "step 1 (refill)"
        print(f"megatron-core {megatron.core.__version__}, torch {torch.__version__}: {what}: "
              f"{n} of {N} elements stale")
        bad += n
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
