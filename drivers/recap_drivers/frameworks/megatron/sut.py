"""The megatron-core SUT: what Megatron runs (capabilities, the skip policy with Megatron's own
checks), the TransformerConfig of each layer, and Megatron's class-level graph state reset
between cases. Its runner is runner.MegatronRunner."""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

import torch

from ... import case as case_mod
from ...core import layers as layers_mod
from ...core.cuda_errors import one_line
from ...core.records import RunData
from ...core.sut import SUT, default_order
from .api import ROLE_TO_MODULE, Api, gelu_tanh, megatron_version
from .graphs import CaptureSpans, reset_buffer_reuse
from .pool_uses import PoolUses
from .runner import MegatronRunner
from .version import recompute_requested


class MegatronSUT(SUT):
    name = "megatron"

    def __init__(self, device: str = "auto", expect_version: Optional[str] = None):
        self.version = megatron_version()
        if expect_version and self.version != expect_version:
            raise RuntimeError(f"megatron-core {self.version} is installed, {expect_version} was asked")
        super().__init__(device)
        if self.device.type != "cuda":
            raise RuntimeError("megatron-core needs CUDA: its RNG tracker and schedules call torch.cuda "
                               "(model_parallel_cuda_manual_seed, forward_backward_no_pipelining)")
        self.api = Api()
        # The graph-safe recompute option: installed before any model is built (graph_safe_recompute.py)
        self.recompute = recompute_requested()[0]
        if self.recompute == "graph-safe":
            from . import graph_safe_recompute

            graph_safe_recompute.install(self.api.tensor_parallel)
        self.pool_uses = PoolUses(torch._C)  # M6: Megatron's unreleased graph-pool uses (pool_uses.py)
        self.capture_spans = CaptureSpans()
        self._init_parallel()

    def _init_parallel(self) -> None:
        import torch.distributed as dist

        if not dist.is_initialized():
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            if "MASTER_PORT" not in os.environ:
                import socket

                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
            torch.cuda.set_device(self.device.index or 0)
            dist.init_process_group(backend="nccl", world_size=1, rank=0)
        ps = self.api.parallel_state
        if not ps.model_parallel_is_initialized():
            ps.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)

    def policy(self) -> str:
        if self.recompute == "graph-safe":
            return "graph-safe"  # the option's checkpoint recomputes in every phase, graphs included
        # PR #3919 (in 0.18.0+): tensor_parallel.checkpoint runs the function without checkpointing
        # during graph warmup and capture: recap's "skip"; before it, CheckpointFunction always
        # checkpoints: recap's "naive"
        src = inspect.getsource(self.api.tensor_parallel.random.checkpoint)
        return "skip" if "is_graph_warmup" in src or "is_graph_capturing" in src else "naive"

    def measured_case(self, c: case_mod.Case) -> case_mod.Case:
        """FullCudaGraphWrapper captures step W and replays it in the same call (runner._capture_step):
        that step is no steady-state step, so one more replay is run and W's is not timed."""
        if c.executor != "full-iteration":
            return c
        import copy

        m = copy.deepcopy(c)
        m.replays += 1
        return m

    def capabilities(self) -> Dict[str, Any]:
        return {
            "kinds": list(case_mod.LAYER_KINDS),
            "dtype": ["fp32", "bf16"],
            "executor": ["eager", "per-layer", "full-iteration"],
            "checkpoint": ["none", "full", "selective"],
            "checkpoint_style": [self.checkpoint_style()],
            "policy": [self.policy()],
            "generator": ["host", "graph-safe"],
            "device_state": [self.device_state],
            "warmup_backward": ["backward", "grad-of-inputs"],
            "shared_pool": [True],
            "microbatch_order": ["default"],
            "graphs": True,
            "per_layer": {"warmup_backward": ["grad-of-inputs"], "generator": ["graph-safe"]},
        }

    def checkpoint_style(self) -> str:
        """megatron-core's tensor_parallel.checkpoint is CheckpointFunction (reentrant); the option's
        replacement checkpoints with saved-tensor hooks (non-reentrant)."""
        return "non-reentrant" if self.recompute == "graph-safe" else "reentrant"

    def sut_version(self) -> str:
        # A patched megatron-core is another system: reports and tables name the patch
        return self.version + ("+graph-safe-recompute" if self.recompute else "")

    def hello(self) -> Dict[str, Any]:
        h = super().hello()
        h["framework"] = {"torch": torch.__version__, "megatron-core": self.version}
        if self.recompute:
            h["framework"]["recompute"] = (f"{self.recompute}: tensor_parallel.checkpoint replaced by "
                                           "recap_drivers/frameworks/megatron/graph_safe_recompute.py")
        return h

    # -- the configs of a case --

    def configs(self, c: case_mod.Case) -> Tuple[List[Any], List[bool], str]:
        """One TransformerConfig per layer (what Megatron's own checks say of it), which layers
        CudaGraphManager graphs, or a skip reason with Megatron's message."""
        api = self.api
        dt = layers_mod.TORCH_DTYPES[c.dtype]
        out, graphed = [], []
        for i, l in enumerate(c.layers):
            g = c.executor == "per-layer" and l.graphed
            kw = dict(num_layers=1, hidden_size=c.hidden, num_attention_heads=max(1, l.heads),
                      ffn_hidden_size=c.ffn(l) if l.kind in ("block", "mlp", "swiglu") else 4 * c.hidden,
                      hidden_dropout=l.dropout, attention_dropout=l.dropout, add_bias_linear=True,
                      gated_linear_unit=False, activation_func=gelu_tanh, bias_activation_fusion=False,
                      bias_dropout_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
                      apply_rope_fusion=False, layernorm_epsilon=layers_mod.NORM_EPS,
                      normalization="LayerNorm", params_dtype=dt, bf16=(c.dtype == "bf16"),
                      attention_softmax_in_fp32=False, apply_query_key_layer_scaling=False,
                      calculate_per_token_loss=True, use_cpu_initialization=False,
                      perform_initialization=False, cuda_graph_warmup_steps=c.warmup)
            if l.kind == "block" and l.checkpoint == "full":
                kw.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
            elif l.kind == "block" and l.checkpoint == "selective":
                kw.update(recompute_granularity="selective",
                          recompute_modules=[ROLE_TO_MODULE[r] for r in l.checkpoint_modules])
            if g:
                kw["cuda_graph_impl"] = "local"
                if not api.new_graph_api:
                    kw["cuda_graph_scope"] = "full"
            elif c.executor == "full-iteration":
                if api.new_graph_api:
                    kw["cuda_graph_impl"] = "full_iteration"
                else:
                    kw["cuda_graph_impl"] = "local"
                    kw["cuda_graph_scope"] = "full_iteration"
            kw.update(self.parallel_config(c))
            kw = {k: v for k, v in kw.items() if k in api.fields}
            try:
                cfg = api.TransformerConfig(**kw)
            except (AssertionError, ValueError, TypeError) as e:
                return [], [], (f"megatron-core {self.version} TransformerConfig rejects layer {i} ({l.kind}): "
                                f"{one_line(str(e) or type(e).__name__)}")
            out.append(cfg)
            graphed.append(g)
        return out, graphed, ""

    def parallel_config(self, c: case_mod.Case) -> Dict[str, Any]:
        """TransformerConfig's parallelism fields (a rank group's, frameworks/megatron/ranks.py): none here."""
        return {}

    def why_skipped(self, c: case_mod.Case) -> str:
        if c.faults:
            return f"faults {', '.join(c.faults)}: fault points are recap's own runtime's (docs/faults.md)"
        if c.executor != "eager" and self.device.type != "cuda":
            return "executor: Megatron's graphs need CUDA"
        if c.any_checkpoint() and c.checkpoint_style != self.checkpoint_style():
            return (f"checkpoint_style {c.checkpoint_style}: this driver checkpoints with megatron-core's "
                    "tensor_parallel.checkpoint only, " +
                    ("which the graph-safe recompute option makes non-reentrant" if self.recompute
                     else "CheckpointFunction (reentrant)"))
        pol = self.policy()
        if c.any_checkpoint() and c.policy != pol:
            return (f"policy {c.policy}: megatron-core {self.sut_version()}'s tensor_parallel.checkpoint is recap's "
                    f"'{pol}' policy" + (" (it skips checkpointing during graph warmup and capture, PR #3919)"
                                         if pol == "skip" else " (it checkpoints in every phase)"))
        if c.order() != default_order(c):
            return ("microbatch_order: forward_backward_no_pipelining (one pipeline stage) runs each "
                    "microbatch's forward then its backward")
        per_layer_graphs = c.executor == "per-layer" and any(l.graphed for l in c.layers)
        if per_layer_graphs:
            if not c.shared_pool:
                return ("shared_pool false: with one pipeline stage CudaGraphManager puts every graph in one "
                        "mempool (use_single_mempool)")
            if c.warmup_backward != "grad-of-inputs":
                return ("warmup_backward backward: CudaGraphManager warms up and captures backward graphs with "
                        "torch.autograd.grad (_CudaGraphRunner.create_fwd_graph / create_bwd_graph)")
            if c.generator != "graph-safe":
                return ("generator host: CudaGraphManager asserts 'RNG tracker does not support cudagraphs!' "
                        "unless use_cudagraphable_rng (megatron/core/transformer/cuda_graphs.py)")
        if c.any_dropout() and c.executor != "eager" and c.device_state != self.device_state:
            return f"device_state {c.device_state}: torch {torch.__version__} keeps its graph RNG state {self.device_state}"
        return self.configs(c)[2]  # and Megatron's checks at construction: MegatronRunner.make_model

    def make_runner(self, c: case_mod.Case, data: RunData) -> MegatronRunner:
        configs, graphed, reason = self.configs(c)
        if reason:  # why_skipped checked it: the configs of a case do not change
            raise RuntimeError(reason)
        return MegatronRunner(self, c, data, configs, graphed)

    def between_cases(self) -> None:
        """Megatron keeps graph state in classes and module globals: clear it between cases."""
        api = self.api
        try:
            api.cuda_graphs.delete_cuda_graphs()
        except Exception:
            pass
        reset_buffer_reuse(api.cuda_graphs)  # 0.16-0.18: kept across delete_cuda_graphs() (M10)
        given = self.pool_uses.give_back()  # the pool's segments go at after_case's empty_cache
        if given and os.environ.get("RECAP_MEMORY_TRACE"):
            print(f"recap_drivers: gave back {given} graph-pool uses Megatron left open", file=sys.stderr, flush=True)
        fcg = api.full_cuda_graph
        try:
            fcg.FullCudaGraphWrapper.curr_iteration = {"training": 0, "validation": 0}
            fcg.FullCudaGraphWrapper.cuda_graph = {"training": None, "validation": None}
            fcg.FullCudaGraphWrapper.result = {"training": None, "validation": None}
            fcg.StaticBufferLoader.static_buffers = {"training": [], "validation": []}
        except Exception:
            pass
        if hasattr(fcg, "_shared_graph_pool"):  # 0.19: one process-wide pool for full-iteration graphs
            fcg._shared_graph_pool = None
        for name in ("_set_capture_end", "_set_warmup_end"):
            f = getattr(api.cuda_graphs, name, None)
            if f is not None:
                try:
                    f()
                except Exception:
                    pass
        # CudaGraphManager.__init__ switches the current stream to a new side stream
        torch.cuda.set_stream(torch.cuda.default_stream(self.device))
