"""Standalone reproduction of finding M12 (results/FINDINGS.md): megatron-core's default pipeline p2p
settings (ModelParallelConfig batch_p2p_comm=True, overlap_p2p_comm=False) with 2 pipeline stages and
virtual stages (the interleaved schedule) post, in one batch, two sends to the same peer: the stage's
input gradient (send_prev) and its output (send_next). With 2 stages the previous and the next stage
are one rank, and point-to-point messages between two ranks are matched in the order they are posted
(NCCL: "point-to-point calls within a group targeting the same peer ... are executed in order";
gloo: by source and tag), so the peer's first receive (recv_prev, the activation it expects) gets the
gradient and its second (recv_next) gets the activation. Same shape, same dtype: no error, wrong numbers.

    PYTHONPATH=/tmp/recap-site-0.19.2 python3 m12_repro.py     # CPU only: two gloo processes

Only megatron-core and torch: megatron-core's own _batched_p2p_ops, called as the interleaved
schedule's steady state calls it for pp 2 (P2PCommunicator.send_forward_backward_recv_forward_backward
-> _communicate -> _batched_p2p_ops). Exits 1 when the activation and the gradient arrive swapped,
0 when each arrives where it is expected.
"""

from __future__ import annotations

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def stage(rank: int, port: int, out: "mp.Queue[tuple]") -> None:
    from megatron.core.pipeline_parallel.p2p_communication import _batched_p2p_ops

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    peer = 1 - rank  # pp 2: the previous and the next stage are the same rank
    activation = torch.full((4,), 100.0 + rank)  # this stage's output, for the next stage
    gradient = torch.full((4,), -1.0 - rank)  # this stage's input gradient, for the previous stage
    got_activation, got_gradient = torch.empty(4), torch.empty(4)
    reqs = _batched_p2p_ops(tensor_send_prev=gradient, tensor_recv_prev=got_activation, tensor_send_next=activation,
                            tensor_recv_next=got_gradient, group=dist.group.WORLD, prev_pipeline_rank=peer,
                            next_pipeline_rank=peer)
    for r in reqs:
        r.wait()
    out.put((rank, got_activation[0].item(), got_gradient[0].item()))
    dist.destroy_process_group()


def main() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")  # megatron-core 0.15.x builds an extension on import
    ctx = mp.get_context("spawn")
    q: "mp.Queue[tuple]" = ctx.Queue()
    procs = [ctx.Process(target=stage, args=(r, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    got = sorted(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    swapped = False
    for rank, act, grad in got:
        peer = 1 - rank
        want_act, want_grad = 100.0 + peer, -1.0 - peer
        ok = (act, grad) == (want_act, want_grad)
        swapped |= not ok
        print(f"rank {rank}: received activation {act} (expected {want_act}), gradient {grad} "
              f"(expected {want_grad}){'' if ok else '  <- swapped'}")
    print("M12 reproduced: activation and gradient swapped" if swapped else "M12 not reproduced")
    return 1 if swapped else 0


if __name__ == "__main__":
    sys.exit(main())
