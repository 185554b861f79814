"""Standalone reproduction of finding M7 (results/FINDINGS.md): megatron-core's TransformerLayer with
recompute_granularity="selective", recompute_modules=["mlp"] and the default add_bias_linear=True.

    PYTHONPATH=/tmp/recap-site-0.19.2 python3 m7_repro.py      # on a GPU, once per version

The MLP returns its fc2 bias Parameter itself (skip_bias_add=True, RowParallelLinear.forward), and
tensor_parallel.checkpoint returns it from CheckpointFunction.apply, which makes the Parameter a
non-leaf whose grad_fn is that CheckpointFunctionBackward. The backward's recompute returns the same
Parameter, so CheckpointFunction.backward's torch.autograd.backward((output, bias), grads) runs that
node again, and again. Prints what it sees and exits 1 when (a) the bias is no longer a leaf after the
forward and (b) the backward has not ended within 20 s while the same layer with add_bias_linear=False
and with no recompute ends at once (the finding); 0 when not reproduced; 2 when it cannot run.
Megatron's own modules only (the local, TransformerEngine-free spec); no harness code.
"""

import os
import sys
import threading
import time

import torch

try:
    import megatron.core
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.transformer.transformer_layer import TransformerLayer
except Exception as e:  # pragma: no cover
    print(f"cannot import megatron-core: {e}")
    sys.exit(2)
if not torch.cuda.is_available():
    print("needs CUDA (megatron-core's RNG tracker and checkpoint)")
    sys.exit(2)

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
if "MASTER_PORT" not in os.environ:  # a free port: two versions may run at once
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
torch.distributed.init_process_group("nccl", world_size=1, rank=0)
parallel_state.initialize_model_parallel(1, 1)
tensor_parallel.model_parallel_cuda_manual_seed(1)
torch.cuda.set_per_process_memory_fraction(0.05)  # the runaway backward of the last run stops there at worst
print(f"megatron-core {megatron.core.__version__}, torch {torch.__version__}")


def layer(recompute: bool, bias: bool):
    kw = dict(num_layers=1, hidden_size=32, num_attention_heads=1, add_bias_linear=bias,
              hidden_dropout=0.0, attention_dropout=0.0, bias_dropout_fusion=False, bias_activation_fusion=False,
              masked_softmax_fusion=False, persist_layer_norm=False, apply_rope_fusion=False,
              normalization="LayerNorm")
    if recompute:
        kw.update(recompute_granularity="selective", recompute_modules=["mlp"])
    tl = TransformerLayer(TransformerConfig(**kw), get_gpt_layer_local_spec().submodules, layer_number=1).cuda()
    return tl


def step(tl, limit_s: float):
    """One forward and backward; the backward in a thread, abandoned after limit_s. Returns
    (fc2 bias is a leaf after the forward, the backward's seconds or None if it had not ended)."""
    x = torch.randn(8, 1, 32, device="cuda", requires_grad=True)
    out = tl(hidden_states=x, attention_mask=None)
    out = out[0] if isinstance(out, tuple) else out
    b = tl.mlp.linear_fc2.bias
    leaf = True if b is None else b.is_leaf
    grad_fn = None if b is None else type(b.grad_fn).__name__ if b.grad_fn is not None else None
    done = {}

    def run():
        t0 = time.perf_counter()
        try:
            out.sum().backward()
            done["s"] = time.perf_counter() - t0
        except Exception as e:
            done["error"] = f"{type(e).__name__}: {str(e)[:200]}"

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(limit_s)
    return leaf, grad_fn, done.get("s"), done.get("error")


results = {}
for name, recompute, bias in (("no recompute, bias", False, True), ("recompute mlp, no bias", True, False),
                              ("recompute mlp, bias (Megatron's default add_bias_linear)", True, True)):
    leaf, grad_fn, s, err = step(layer(recompute, bias), 20.0)
    results[name] = (leaf, s)
    state = f"ended in {s:.3f} s" if s is not None else (f"raised {err}" if err else "had NOT ended after 20 s")
    print(f"{name:58s} fc2 bias leaf after forward: {leaf} (grad_fn {grad_fn}); backward {state}; "
          f"threads alive {threading.active_count()}; allocated {torch.cuda.memory_allocated() >> 20} MiB")
    sys.stdout.flush()

ok_a = results["no recompute, bias"][1] is not None and results["recompute mlp, no bias"][1] is not None
bad = results["recompute mlp, bias (Megatron's default add_bias_linear)"]
reproduced = ok_a and bad[0] is False and bad[1] is None
print("M7 reproduced" if reproduced else "M7 not reproduced")
sys.stdout.flush()
os._exit(1 if reproduced else 0)  # the runaway backward thread is still running: do not wait for it
