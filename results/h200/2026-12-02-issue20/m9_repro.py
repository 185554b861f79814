"""Standalone reproduction of finding M9 (results/FINDINGS.md): megatron-core 0.16.x and 0.17.x per-layer
CUDA graphs (cuda_graph_impl="local") compute the weight gradient of the first graphed layer from its
output gradient instead of its input.

    PYTHONPATH=/tmp/recap-site-0.16.1 python3 m9_repro.py      # on a GPU, once per version

Mechanism (megatron/core/transformer/cuda_graphs.py, 0.16.1 line numbers; 0.17.1: :874, :989-998,
:1059, :641-645):
_CudaGraphRunner.create_fwd_graph gives a graph input that is no other graph's output a static buffer
from _CudagraphGlobalRecord.tensor_reuse_pool (_resolve_input_buffer, :872) and, right after the
forward capture, hands that buffer back to the pool "as it will not be reused after this forward pass"
(:986-995). It is still the forward graph's static input, and the captured forward saved it for the
backward (F.linear keeps its input to compute grad_weight = grad_output^T @ input). create_bwd_graph then
takes the static output-gradient buffer of the (last) graphed layer from the same pool (:1056): the same
tensor. At replay _CudagraphReplayNode.backward copies the incoming gradient into that buffer (:639-643)
before replaying the backward graph, overwriting the saved input: grad_weight becomes
grad_output^T @ grad_output. Introduced by PR #2572 (8baf01408a, reapplied as #3056, 642fdd9010),
removed by PR #4433 (481efd020e, first in core_v0.18.0).

The model is what recap's driver builds for its shrunk case (controls/0.16.1/corpus-megatron-0.16.1-
control/eager-vs-graphed-incorrect-8cb05ab69d45.json): one GraphableMegatronModule holding a Linear
(hidden 8, 4 tokens, fp32), wrapped in Megatron's DistributedDataParallel, driven by
get_forward_backward_func() (one pipeline stage: step 0 runs eagerly and records, create_cudagraphs()
runs at its end, step 1 replays), 2 microbatches, cuda_graph_warmup_steps 0. The gradient of step 1 is
read from main_grad and compared with the same computation done eagerly in plain torch. Prints what it
sees (also whether the runner's static input and output-gradient buffers share memory); exits 1 when
the graphed weight gradient is wrong (the finding), 0 when not reproduced, 2 when it cannot run.
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


def main() -> int:
    worst = two_steps(["linear"], MICROBATCHES, "one graphed Linear")
    reproduced = worst > 1e-3
    print("M9 reproduced: the replayed weight gradient is wrong" if reproduced else "M9 not reproduced")
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
