"""The megatron-core names this driver uses, its version, and the refusals it documents."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...core.cuda_errors import one_line
from ...core.errors import SkipCase

ROLE_TO_MODULE = {"attn_core": "core_attn", "mlp": "mlp", "norm": "layernorm"}


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def megatron_version() -> str:
    """The imported megatron-core's version; a source checkout's carries its commit (version.py)."""
    from .version import installed_version

    v = installed_version()
    if v is None:
        import megatron.core as mc

        return str(getattr(mc, "__version__", "unknown"))
    return v


class Api:
    """The megatron-core names this driver uses, imported once (importing megatron.core builds a
    small CUDA extension on first use, seconds)."""

    def __init__(self) -> None:
        from megatron.core import full_cuda_graph, parallel_state, tensor_parallel
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
        from megatron.core.enums import ModelType
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.transformer import cuda_graphs
        from megatron.core.transformer.module import GraphableMegatronModule, MegatronModule
        from megatron.core.transformer.transformer_config import TransformerConfig
        from megatron.core.transformer.transformer_layer import TransformerLayer

        self.DDP, self.DDPConfig = DistributedDataParallel, DistributedDataParallelConfig
        self.finalize_model_grads = finalize_model_grads  # a rank group's (ranks.py)
        self.parallel_state, self.tensor_parallel = parallel_state, tensor_parallel
        self.cuda_graphs, self.full_cuda_graph = cuda_graphs, full_cuda_graph
        self.ModelType, self.local_spec = ModelType, get_gpt_layer_local_spec
        self.get_forward_backward_func = get_forward_backward_func
        self.GraphableMegatronModule, self.MegatronModule = GraphableMegatronModule, MegatronModule
        self.TransformerConfig, self.TransformerLayer = TransformerConfig, TransformerLayer
        fields = getattr(TransformerConfig, "__dataclass_fields__", {})
        # 0.19: cuda_graph_impl "full_iteration" and cuda_graph_modules; 0.15: cuda_graph_scope
        self.new_graph_api = "cuda_graph_modules" in fields
        self.fields = set(fields)


# The refusals megatron-core documents (asserts with these words) for configurations this driver
# knowingly passes: a case they hit is skipped with Megatron's words. Anything else raised while
# Megatron builds the model is a failed run (phase "build"): a finding, not a skip.
KNOWN_REFUSALS = [
    # CudaGraphManager.__init__ (megatron/core/transformer/cuda_graphs.py, 0.15.3 and 0.19): graphs
    # need a cudagraphable RNG tracker; recap's generator "host" is use_cudagraphable_rng=False,
    # and on 0.15.3 a full-iteration config ("local" + scope full_iteration) makes a manager too
    ("RNG tracker does not support cudagraphs!", "generator host with CUDA graphs"),
    # CudaGraphManager.__init__, 0.15.3: the environment's allocator configuration
    ("expandable_segments:True may not be safe when using CUDA Graphs", "PYTORCH_CUDA_ALLOC_CONF"),
    # WrappedTorchNorm.__new__ (megatron/core/transformer/torch_norm.py, 0.15.3 and 0.19): the local
    # spec's norm without apex refuses sequence_parallel (a rank group's sp case, ranks.py)
    ("sequence parallel not supported by torch LayerNorm", "sp without apex"),
]


def known_refusal(e: BaseException) -> bool:
    return isinstance(e, (AssertionError, ValueError)) and any(p in str(e) for p, _ in KNOWN_REFUSALS)


def refused(version: str, e: BaseException) -> SkipCase:
    """A documented refusal at construction, as the skip that quotes Megatron's words."""
    return SkipCase(f"megatron-core {version} refuses the model at construction: "
                    f"{one_line(str(e) or type(e).__name__)}")
