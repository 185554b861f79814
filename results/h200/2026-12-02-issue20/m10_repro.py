"""Standalone reproduction of finding M10 (results/FINDINGS.md): megatron-core 0.16.x to 0.18.x
(TensorReusePool) hand one static buffer to two users after delete_cuda_graphs(), when the graphs made
before it ended with a layer that returns its input (as a view); a later single graphed Linear then
computes its weight gradient from its output gradient instead of its input.

    PYTHONPATH=/tmp/recap-site-0.18.2 python3 m10_repro.py      # on a GPU, once per version

Mechanism (megatron/core/transformer/cuda_graphs.py, 0.18.2 line numbers; 0.16.1: :160-200,
:490-517, :1020-1122):
_CudaGraphRunner.create_bwd_graph takes the last graphed layer's static output-gradient buffer G from
_CudagraphGlobalRecord.tensor_reuse_pool (:1091) and, after the capture, returns it to the pool
(:1143-1157). When that layer returns its input (a view of it), the input gradient torch.autograd.grad
gives back is a view of G; it becomes the previous graph's output-gradient buffer ("bwd_cudagraph_buffer",
:1080-1090, :1118-1126), and that graph returns it to the pool as well after its own capture:
TensorReusePool.insert (:204-207) appends without checking, and owns() compares data_ptr(), so the pool's
free list now holds the same memory twice. delete_cuda_graphs() (:516-543) does not reset the pool (a
class attribute of _CudagraphGlobalRecord), so the next create_cudagraphs() in the process hands G to a
forward graph as its static input (_resolve_input_buffer, :910) and the view of G to its backward graph as
the static output gradient (:1091): at replay the incoming gradient is copied over the saved input.
Within one create_cudagraphs() the duplicate is harmless for one pipeline stage (all forward graphs are
captured before any backward graph); Megatron itself calls delete_cuda_graphs() and captures again
(inference/engines/dynamic_engine.py, the suspend/resume of RL), and so does any process that trains
more than one model. Introduced with the pool by PR #2572 (8baf01408a, reapplied as #3056, 642fdd9010);
gone with PR #5451 (5e4fe9b3c7, first in core_v0.19.0), which removed TensorReusePool.

Three models in one process, each wrapped in Megatron's DistributedDataParallel and driven by
get_forward_backward_func() (step 0 eager and recording, create_cudagraphs() at its end, step 1
replaying), every layer a graphed GraphableMegatronModule (hidden 8, 4 tokens, fp32, 2 microbatches):
  1. one Linear: the control (on 0.16.x/0.17.x it already fails, finding M9);
  2. a Linear followed by a layer that returns its input (recap's dropout with p = 0), step 0 only
     (its graphs are made), then delete_cuda_graphs(): prints the pool's free list;
  3. one Linear again: its replayed weight gradient against plain torch.
Exits 1 when 3 is wrong and 1 was right (the finding), or, where M9 already breaks 1, when 2 left the
same memory in the free list twice (the mechanism); 0 when not reproduced; 2 when it cannot run.
Megatron's own classes and torch only; no harness code.
"""

import os
import sys

import torch

try:
    import megatron.core
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
    )
    from megatron.core.enums import ModelType
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer import cuda_graphs
    from megatron.core.transformer.module import GraphableMegatronModule
    from megatron.core.transformer.transformer_config import TransformerConfig
except Exception as e:  # noqa: BLE001  # pragma: no cover
    print(f"cannot import megatron-core: {e}")
    sys.exit(2)
if not torch.cuda.is_available():
    print("needs CUDA (megatron-core's CUDA graphs)")
    sys.exit(2)

HIDDEN, TOKENS, MICROBATCHES = 8, 4, 2

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
if "MASTER_PORT" not in os.environ:  # a free port: two versions may run at once
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(s.getsockname()[1])
torch.cuda.set_device(0)
torch.distributed.init_process_group("nccl", world_size=1, rank=0)
parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
print(f"megatron-core {getattr(megatron.core, '__version__', '?')}, torch {torch.__version__}")


def config() -> TransformerConfig:
    """The TransformerConfig recap's driver gives a graphed layer (MegatronSUT.configs)."""
    fields = set(getattr(TransformerConfig, "__dataclass_fields__", {}))
    kw = {"num_layers": 1, "hidden_size": HIDDEN, "num_attention_heads": 1, "calculate_per_token_loss": True,
          "cuda_graph_impl": "local", "cuda_graph_warmup_steps": 0, "params_dtype": torch.float32}
    if "cuda_graph_modules" not in fields:  # before 0.19: the scope field names the whole layer
        kw["cuda_graph_scope"] = "full"
    return TransformerConfig(**{k: v for k, v in kw.items() if k in fields})


class Layer(GraphableMegatronModule):
    """A graphable Megatron module ([s, 1, h] in and out, as Megatron's layers pass), as recap's driver
    builds its layer kinds (SmallLayer): "linear" a Linear, "identity" what recap's dropout with p = 0
    is (it returns its input as it is; through the squeeze/unsqueeze the output is a view of the input)."""

    def __init__(self, cfg: TransformerConfig, kind: str, seed: int) -> None:
        super().__init__(cfg)
        self.kind = kind
        self.linear = None
        if kind == "linear":
            g = torch.Generator().manual_seed(seed)
            self.linear = torch.nn.Linear(HIDDEN, HIDDEN).cuda()
            with torch.no_grad():
                self.linear.weight.copy_(torch.randn(HIDDEN, HIDDEN, generator=g) * 0.3)
                self.linear.bias.copy_(torch.randn(HIDDEN, generator=g) * 0.1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = hidden_states.squeeze(1)
        y = self.linear(x) if self.linear is not None else x
        return y.unsqueeze(1)


class Decoder(torch.nn.Module):
    def __init__(self, layers: torch.nn.ModuleList) -> None:
        super().__init__()
        self.layers = layers


class Model(torch.nn.Module):
    """The model forward_backward_func drives: the layers in order."""

    def __init__(self, cfg: TransformerConfig, kinds) -> None:
        super().__init__()
        self.config = cfg
        self.model_type = ModelType.encoder_or_decoder
        self.layers = torch.nn.ModuleList([Layer(cfg, k, i + 1) for i, k in enumerate(kinds)])
        self.decoder = Decoder(self.layers)  # set_current_microbatch looks for model.decoder.layers

    def set_input_tensor(self, tensor) -> None:
        pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.unsqueeze(1)
        for layer in self.layers:
            h = layer(hidden_states=h)
            h = h[0] if isinstance(h, tuple) else h
        return h.squeeze(1)


def build(kinds):
    tensor_parallel.model_parallel_cuda_manual_seed(1, use_cudagraphable_rng=True, force_reset_rng=True)
    cfg = config()
    model = Model(cfg, kinds)
    side = torch.cuda.Stream()  # as recap's driver (and Megatron-LM's get_model) builds DDP
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ddp = DistributedDataParallel(config=cfg, ddp_config=DistributedDataParallelConfig(), module=model)
    torch.cuda.current_stream().wait_stream(side)
    return model, ddp


def loss_of(y: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return 0.5 * ((y - t) ** 2).sum() / y.numel()


def step(ddp, fbf, xs, ts) -> None:
    ddp.zero_grad_buffer()
    ones = torch.ones((), dtype=torch.int, device="cuda")

    def data():
        for x, t in zip(xs, ts):
            yield {"x": x, "t": t}

    def forward_step(it, model):
        b = next(it)
        y = model(b["x"].detach().requires_grad_(True))

        def loss_func(out):
            loss = loss_of(out, b["t"])
            return loss, ones, {"loss": loss.detach()}

        return y, loss_func

    fbf(forward_step_func=forward_step, data_iterator=data(), model=ddp, num_microbatches=len(xs),
        seq_length=TOKENS, micro_batch_size=1, forward_only=False)
    torch.cuda.synchronize()


def eager_grads(model, xs, ts):
    """The same gradients in plain torch (the layer's Linear called directly, no graphs)."""
    out = {}
    for name, p in model.named_parameters():
        out[name] = torch.zeros_like(p)
    for x, t in zip(xs, ts):
        params = dict(model.named_parameters())
        h = x
        for layer in model.layers:
            if layer.linear is not None:
                h = torch.nn.functional.linear(h, layer.linear.weight, layer.linear.bias)
        gs = torch.autograd.grad(loss_of(h, t), list(params.values()))
        for (name, _), g in zip(params.items(), gs):
            out[name] += g
    return out


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / max(b.double().norm(), 1e-30))


def shared_buffers(model) -> None:
    """Whether each runner's static input and static output-gradient buffers share memory."""
    for i, layer in enumerate(model.layers):
        for r in getattr(layer.cudagraph_manager, "cudagraph_runners", []):
            inp = [t for t in getattr(r, "fwd_graph_input_surface", []) if torch.is_tensor(t)][:1]
            gout = [t for t in getattr(r, "static_grad_outputs", None) or [] if torch.is_tensor(t)]
            if inp and gout:
                same = inp[0].data_ptr() == gout[0].data_ptr()
                print(f"  layer {i} runner: static input buffer {inp[0].data_ptr():#x}, static output-gradient "
                      f"buffer {gout[0].data_ptr():#x}: {'THE SAME MEMORY' if same else 'distinct'}")


def two_steps(kinds, microbatches: int, label: str, steps: int = 2) -> float:
    """Step 0 (eager; graphs made at its end) and step 1 (replay) of a new model of these layers, all
    graphed; prints each gradient's error against plain torch; returns step 1's worst (raises what
    the steps raise). steps=1: step 0 alone."""
    print(f"{label}: layers {kinds}, {microbatches} microbatch(es)")
    model, ddp = build(kinds)
    fbf = get_forward_backward_func()
    g = torch.Generator(device="cuda").manual_seed(2)
    worst = 0.0
    for s in range(steps):
        xs = [torch.randn(TOKENS, HIDDEN, device="cuda", generator=g) for _ in range(microbatches)]
        ts = [torch.randn(TOKENS, HIDDEN, device="cuda", generator=g) for _ in range(microbatches)]
        step(ddp, fbf, xs, ts)
        ref = eager_grads(model, xs, ts)
        for name, p in model.named_parameters():
            e = rel_err(p.main_grad, ref[name])
            print(f"  step {s} ({'eager, graphs made at its end' if s == 0 else 'graph replay'}): "
                  f"{name:24s} rel L2 error vs eager {e:.2e}")
            if s == 1:
                worst = max(worst, e)
    shared_buffers(model)
    return worst


def pool_duplicates() -> int:
    """How many entries of the reuse pool's free list share memory with an earlier entry (0.16-0.18)."""
    record = getattr(cuda_graphs, "_CudagraphGlobalRecord", None)
    pool = getattr(record, "tensor_reuse_pool", None)
    if pool is None:
        print("  no TensorReusePool in this version (removed by PR #5451)")
        return 0
    ptrs = [t.data_ptr() for t in pool.pool]
    dup = len(ptrs) - len(set(ptrs))
    print(f"  reuse pool: {len(ptrs)} free entries, {len(set(ptrs))} distinct buffers "
          f"({', '.join(hex(p) for p in ptrs)})")
    return dup


def main() -> int:
    control = two_steps(["linear"], MICROBATCHES, "1. one graphed Linear, a fresh process")
    cuda_graphs.delete_cuda_graphs()
    two_steps(["linear", "identity"], MICROBATCHES, "2. a graphed Linear, then a graphed layer returning its input",
              steps=1)
    dup = pool_duplicates()
    cuda_graphs.delete_cuda_graphs()
    after = two_steps(["linear"], MICROBATCHES, "3. one graphed Linear after delete_cuda_graphs()")
    if control <= 1e-3:
        reproduced = after > 1e-3
        why = "model 3's replayed weight gradient is wrong, model 1's was right"
    else:
        reproduced = dup > 0
        why = ("model 1 is already wrong here (finding M9); model 2 left the same memory in the pool's "
               "free list twice")
    print(f"M10 reproduced: {why}" if reproduced else "M10 not reproduced")
    return 1 if reproduced else 0


if __name__ == "__main__":
    try:
        rc = main()
    except Exception:  # noqa: BLE001  # a failure this script does not look for: not a verdict
        import traceback

        traceback.print_exc()
        print("could not complete (exit 2)")
        rc = 2
    sys.stdout.flush()
    os._exit(rc)
