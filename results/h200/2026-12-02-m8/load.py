"""Keeps the GPU busy from a second process (bf16 matmuls for SECONDS), as the other campaigns'
workers did in run-b.sh's campaign, so that a worker's streams queue work behind it."""
import sys, time
import torch
end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
while time.time() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
