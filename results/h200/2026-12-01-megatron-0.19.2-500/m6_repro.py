"""Standalone reproduction of finding M6 (results/FINDINGS.md), for the next GPU session:
megatron-core 0.19.2's alloc_tensor_from_graph_mempool leaves a use on CudaGraphManager's global
mempool, so after delete_cuda_graphs() the pool's memory stays reserved.

    PYTHONPATH=/tmp/recap-site-0.19.2 python3 m6_repro.py      # on the H200

Prints, in MiB, memory_reserved after each stage, and exits 1 when the pool stays reserved after
delete_cuda_graphs() + empty_cache() but goes once its leftover use is released (the finding), 0
when it goes by itself (not reproduced), 2 when it cannot run. Only Megatron's own function and
torch's allocator entry points are used; no model, no graph capture.
"""

import sys

import torch

try:
    from megatron.core.transformer import cuda_graphs as cg
except Exception as e:  # pragma: no cover
    print(f"cannot import megatron-core: {e}")
    sys.exit(2)
if not torch.cuda.is_available() or not hasattr(cg, "alloc_tensor_from_graph_mempool"):
    print("needs CUDA and megatron-core >= 0.19 (alloc_tensor_from_graph_mempool)")
    sys.exit(2)

MiB = 1 << 20
dev = torch.cuda.current_device()


def reserved(stage):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    r = torch.cuda.memory_reserved(dev) // MiB
    print(f"{stage:60s} reserved {r} MiB")
    return r


base = reserved("start")
cg.CudaGraphManager.global_mempool = torch.cuda.graph_pool_handle()  # as CudaGraphManager.__init__ does
pool = cg.CudaGraphManager.global_mempool
bufs = [cg.alloc_tensor_from_graph_mempool(cg.ArgMetadata(torch.empty(64 << 20, dtype=torch.uint8, device="cuda")))
        for _ in range(4)]  # 4 static buffers of 64 MiB, as the runners make them
reserved("4 x 64 MiB static buffers in the global mempool")
del bufs
cg.delete_cuda_graphs()  # resets the runners and sets global_mempool = None
after_delete = reserved("buffers freed, delete_cuda_graphs(), empty_cache()")
for _ in range(4):  # the uses alloc_tensor_from_graph_mempool took (begin without release)
    torch._C._cuda_releasePool(dev, pool)
after_release = reserved("after releasing the 4 uses it left")
held = after_delete - base
print(f"held after delete_cuda_graphs: {held} MiB; after the releases: {after_release - base} MiB")
sys.exit(1 if held >= 200 and after_release - base < 64 else 0)
