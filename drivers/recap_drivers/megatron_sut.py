"""The megatron-core SUT: recap cases run the way a Megatron user runs them.

What is Megatron's own code here (read in megatron/core of 0.15.3 and 0.19.2):
  block      megatron.core.transformer.TransformerLayer from get_gpt_layer_local_spec() (no
             TransformerEngine), configured through TransformerConfig as a user does: hidden and
             attention dropout, recompute_granularity / recompute_modules (selective: recap's
             attn_core -> "core_attn", mlp -> "mlp", norm -> "layernorm"), cuda_graph_impl and the
             graph scope fields of the version. recap's "full" checkpoint of a block is
             recompute_granularity "full", method "uniform", one layer per unit: what
             TransformerBlock._checkpointed_forward does, tensor_parallel.checkpoint around the layer.
  smaller    recap's layer kinds (layers.py, torch modules) checkpointed with megatron-core's
  kinds      tensor_parallel.checkpoint (CheckpointFunction), attention dropout drawn inside
             get_cuda_rng_tracker().fork() as DotProductAttention draws it, hidden dropouts from the
             default generator as bias_dropout_add draws them; a graphed one is a
             GraphableMegatronModule, so Megatron's CudaGraphManager captures it.
  RNG        tensor_parallel.model_parallel_cuda_manual_seed(seed, use_cudagraphable_rng=...) per
             case; recap's generator "graph-safe" is use_cudagraphable_rng=True, "host" False.
  steps      get_forward_backward_func() (forward_backward_no_pipelining on one rank) runs each
             step's microbatches, forward then backward each; calculate_per_token_loss with one
             token per microbatch keeps recap's summed gradients (no 1/num_microbatches).
  per-layer  cuda_graph_impl "local": step 0 runs eagerly and records (CudaGraphManager), and at its
             end forward_backward_func calls create_cudagraphs(), which warms each graph up
             cuda_graph_warmup_steps (= the case's warmup) times with torch.autograd.grad and
             captures it; later steps replay. One graph per layer serves every microbatch (one
             pipeline stage: reuse_cudagraphs, one mempool).
  full-      0.15.3: cuda_graph_impl "local" + cuda_graph_scope "full_iteration"; 0.19.2:
  iteration  cuda_graph_impl "full_iteration"; FullCudaGraphWrapper(forward_backward_func,
             cuda_graph_warmup_steps = warmup): steps 0 .. W-1 eager, step W captures and replays.
  SGD        p -= lr * grad after each step, outside the graphs (Megatron's optimizer is too).

The harness's choices (not Megatron's): the RNG states are restored after create_cudagraphs() to
what they were when the step's backwards ended (finalize_model_grads_func, a user hook Megatron
calls right before it), so its warmup draws do not shift the replays' masks against the eager twin
(as the torch driver does around make_graphed_callables); Megatron's class-level graph state
(_CudagraphGlobalRecord, CudaGraphManager pools, FullCudaGraphWrapper, StaticBufferLoader) is
reset between cases with delete_cuda_graphs() and by clearing the wrapper's dicts; the graph-pool
uses Megatron takes and never releases are given back (pool_uses.py, finding M6).
"""

from __future__ import annotations

import gc
import inspect
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import case as case_mod
from . import layers as layers_mod
from . import observe
from . import torch_sut
from .pool_uses import PoolUses
from .torch_sut import Runner, RunRecord, StepRecord, TorchSUT

ROLE_TO_MODULE = {"attn_core": "core_attn", "mlp": "mlp", "norm": "layernorm"}


def _gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def megatron_version() -> str:
    try:
        from importlib.metadata import version

        return version("megatron-core")
    except Exception:
        import megatron.core as mc

        return getattr(mc, "__version__", "unknown")


def _version_tuple(v: str) -> Tuple[int, ...]:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


class _Api:
    """The megatron-core names this driver uses, imported once (importing megatron.core builds a
    small CUDA extension on first use, seconds)."""

    def __init__(self):
        from megatron.core import parallel_state, tensor_parallel
        from megatron.core.enums import ModelType
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.transformer import cuda_graphs
        from megatron.core.transformer.module import GraphableMegatronModule, MegatronModule
        from megatron.core.transformer.transformer_config import TransformerConfig
        from megatron.core.transformer.transformer_layer import TransformerLayer
        from megatron.core import full_cuda_graph
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

        self.DDP = DistributedDataParallel
        self.DDPConfig = DistributedDataParallelConfig

        self.parallel_state = parallel_state
        self.tensor_parallel = tensor_parallel
        self.ModelType = ModelType
        self.local_spec = get_gpt_layer_local_spec
        self.get_forward_backward_func = get_forward_backward_func
        self.cuda_graphs = cuda_graphs
        self.GraphableMegatronModule = GraphableMegatronModule
        self.MegatronModule = MegatronModule
        self.TransformerConfig = TransformerConfig
        self.TransformerLayer = TransformerLayer
        self.full_cuda_graph = full_cuda_graph
        fields = getattr(TransformerConfig, "__dataclass_fields__", {})
        # 0.19: cuda_graph_impl "full_iteration" and cuda_graph_modules; 0.15: cuda_graph_scope
        self.new_graph_api = "cuda_graph_modules" in fields
        self.fields = set(fields)


# ---- modules ---------------------------------------------------------------------------------


class MegatronCheckpoint(nn.Module):
    """megatron-core's tensor_parallel.checkpoint (CheckpointFunction) around a module."""

    def __init__(self, api: _Api, inner: nn.Module):
        super().__init__()
        self.api = api
        self.inner = inner
        self.recap_path = getattr(inner, "recap_path", "")
        self.recap_top = getattr(inner, "recap_top", -1)

    def recap_params(self):
        return layers_mod.recap_params_of(self.inner)

    def forward(self, x):
        return self.api.tensor_parallel.checkpoint(self.inner, False, x)


def _make_small_layer_class(api: _Api):
    class SmallLayer(api.GraphableMegatronModule):
        """One of recap's smaller kinds as a Megatron module: graphable by CudaGraphManager when
        its config says cuda_graph_impl "local"."""

        def __init__(self, config, inner: nn.Module, name: str):
            super().__init__(config)
            self.inner = inner
            self.recap_path = name

        def recap_params(self):
            return layers_mod.recap_params_of(self.inner)

        def forward(self, hidden_states):
            # Megatron's graphed modules pass [s, b, h] (b = 1) between them; recap's layers [T, h]
            observe.position.enter_layer(self.recap_path)
            return self.inner(hidden_states.squeeze(1)).unsqueeze(1)

    return SmallLayer


def _first(out):
    """CudaGraphManager returns a tuple of outputs; TransformerLayer returns (output, context)."""
    return out[0] if isinstance(out, tuple) else out


class BlockLayer(nn.Module):
    """recap's `block` as Megatron's TransformerLayer; [tokens, hidden] <-> Megatron's [s, b, h]."""

    def __init__(self, api: _Api, layer, name: str, full_checkpoint: bool):
        super().__init__()
        self.api = api
        self.layer = layer
        self.recap_path = name
        self.full_checkpoint = full_checkpoint

    def forward(self, h):  # [s, b, h]
        observe.position.enter_layer(self.recap_path)
        if self.full_checkpoint:
            # TransformerBlock._checkpointed_forward, recompute_method "uniform", one layer a unit
            layer = self.layer

            def custom(hidden_states):
                return _first(layer(hidden_states=hidden_states, attention_mask=None))

            return self.api.tensor_parallel.checkpoint(custom, False, h)
        return _first(self.layer(hidden_states=h, attention_mask=None))


def _qkv_rows(hidden: int, heads: int) -> torch.Tensor:
    """Megatron's linear_qkv row r holds recap's row perm[r]: Megatron interleaves per head
    [q(dh) k(dh) v(dh)] (num_query_groups = heads), recap stacks [q | k | v] by columns blocks."""
    dh = hidden // heads
    perm = []
    for n in range(heads):
        for part in range(3):
            for d in range(dh):
                perm.append(part * hidden + n * dh + d)
    return torch.tensor(perm, dtype=torch.long)


class MegatronModel(layers_mod.RecapParamList):
    """The stack as the `model` forward_backward_func drives, with recap's parameter list."""

    def __init__(self, api: _Api, c: case_mod.Case, device, configs: List[Any], graphed_layers: List[bool]):
        super().__init__()
        self.api = api
        self.case = c
        self.config = configs[model_config_index(graphed_layers)] if configs else None
        self.model_type = api.ModelType.encoder_or_decoder
        SmallLayer = _make_small_layer_class(api)
        self.layers = nn.ModuleList()
        self.graphable = nn.ModuleList()  # the Megatron modules that own a CudaGraphManager
        self.named: List[Tuple[str, nn.Parameter]] = []
        self.loaders: List[Any] = []
        dt = layers_mod.TORCH_DTYPES[c.dtype]
        for i, l in enumerate(c.layers):
            name = f"{l.kind}{i}"
            cfg = configs[i]
            if l.kind == "block":
                tl = api.TransformerLayer(cfg, api.local_spec().submodules, layer_number=1)
                tl.to(device=device, dtype=dt)
                for m in tl.modules():
                    m.recap_path = name
                core = tl.self_attention.core_attention
                core.recap_site = (name + ".attn.core", "attn_dropout")
                tl.recap_layer = name
                self.layers.append(BlockLayer(api, tl, name, l.checkpoint == "full"))
                self.graphable.append(tl)
                self._block_params(name, tl, c.hidden, l.heads)
            else:
                wrap = self._wrap(c, i)
                inner = layers_mod.build_layer(c, i, device, wrap).inner
                for m in inner.modules():
                    if isinstance(m, layers_mod.AttentionCore):
                        m.rng_context = api.tensor_parallel.get_cuda_rng_tracker().fork
                layer = SmallLayer(cfg, inner, name) if graphed_layers[i] else _Plain(inner, name)
                self.layers.append(layer)
                if graphed_layers[i]:
                    self.graphable.append(layer)
                for n, p in layers_mod.recap_params_of(inner):
                    self.named.append((n, p))
                    self.loaders.append(None)
        # forward_backward_func's set_current_microbatch looks for model.decoder.layers
        self.decoder = _Decoder(self.graphable)

    def _wrap(self, c: case_mod.Case, i: int):
        l = c.layers[i]
        api = self.api

        def wrap(m: nn.Module, role: str) -> nn.Module:
            if l.checkpoint == "full" and role == "block":
                return MegatronCheckpoint(api, m)
            if l.checkpoint == "selective" and role in l.checkpoint_modules:
                return MegatronCheckpoint(api, m)
            return m

        return wrap

    def _block_params(self, name: str, tl, hidden: int, heads: int):
        sa, mlp = tl.self_attention, tl.mlp
        rows = _qkv_rows(hidden, heads).to(tl.input_layernorm.weight.device)
        table = [
            (".ln1.weight", tl.input_layernorm.weight, None), (".ln1.bias", tl.input_layernorm.bias, None),
            (".attn.qkv.weight", sa.linear_qkv.weight, rows), (".attn.qkv.bias", sa.linear_qkv.bias, rows),
            (".attn.proj.weight", sa.linear_proj.weight, None), (".attn.proj.bias", sa.linear_proj.bias, None),
            (".ln2.weight", tl.pre_mlp_layernorm.weight, None), (".ln2.bias", tl.pre_mlp_layernorm.bias, None),
            (".mlp.fc1.weight", mlp.linear_fc1.weight, None), (".mlp.fc1.bias", mlp.linear_fc1.bias, None),
            (".mlp.fc2.weight", mlp.linear_fc2.weight, None), (".mlp.fc2.bias", mlp.linear_fc2.bias, None),
        ]
        for suffix, p, perm in table:
            self.named.append((name + suffix, p))
            self.loaders.append(perm)

    def layer_params(self, i: int) -> List[nn.Parameter]:
        return []

    def load(self, values: Dict[str, torch.Tensor]):
        with torch.no_grad():
            for (n, p), perm in zip(self.named, self.loaders):
                v = values[n].to(p.device)
                if perm is not None:
                    v = v.index_select(0, perm)
                p.copy_(v.to(p.dtype))

    # A gradient or value of parameter i in recap's layout (qkv rows back in recap's order): what
    # the observation reports for both (the parameters too: the fp64 training oracle loads them)
    def recap_layout(self, i: int, g: torch.Tensor) -> torch.Tensor:
        perm = self.loaders[i]
        if perm is None:
            return g
        out = torch.empty_like(g)
        out.index_copy_(0, perm, g)  # perm lives on the device: this may run inside a capture
        return out

    def set_input_tensor(self, tensor):  # one pipeline stage: nothing comes from a previous one
        pass

    def forward(self, x):  # [T, h] in and out, [T, 1, h] between the layers
        h = x.unsqueeze(1)
        for l in self.layers:
            h = _first(l(hidden_states=h)) if isinstance(l, self.api.GraphableMegatronModule) else l(h)
        return h.squeeze(1)


def model_config_index(graphed_layers: List[bool]) -> int:
    """Which layer's TransformerConfig the model and its DDP wrapper carry: a graphed layer's when
    any layer is graphed, else layer 0's. Each layer has its own config and only graphed layers'
    say cuda_graph_impl "local" (MegatronSUT.configs). Two readers, two configs:
      - whether a layer gets graphs is decided by its own config: GraphableMegatronModule.__init__
        creates a CudaGraphManager only when `config.cuda_graph_impl == "local"`
        (megatron/core/transformer/module.py, 0.15.3 and 0.19);
      - whether graphs are made at all is decided by the model's: forward_backward_no_pipelining
        reads `config = get_model_config(model)` (the DDP wrapper's .config, megatron/core/utils.py
        get_attr_wrapped_model) and calls create_cudagraphs() only when
        `config.cuda_graph_impl == "local"` (megatron/core/pipeline_parallel/schedules.py; 0.15.3
        also requires cuda_graph_scope != "full_iteration").
    With configs[0] a case whose layer 0 is not graphed built no graph at all (issue 18). The
    model's config makes no layer graphed, and the fields the schedule and DDP read otherwise
    (finalize_model_grads_func, calculate_per_token_loss, timers, ...) are equal in every layer's
    config."""
    for i, g in enumerate(graphed_layers):
        if g:
            return i
    return 0


class _Plain(nn.Module):
    def __init__(self, inner, name):
        super().__init__()
        self.inner = inner
        self.recap_path = name

    def forward(self, hidden_states):
        observe.position.enter_layer(self.recap_path)
        return self.inner(hidden_states.squeeze(1)).unsqueeze(1)


class _Decoder(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = layers


# ---- where Megatron's own dropouts draw ------------------------------------------------------

_FRAME_SITES = {"_forward_attention": ".drop1", "_forward_mlp": ".mlp.dropout"}


def resolve_site() -> Optional[Tuple[str, str]]:
    """The recap site of a dropout drawn inside Megatron's code, read from the Python stack: the
    core attention module (tagged with recap_site), or bias_dropout_add called from
    TransformerLayer._forward_attention / _forward_mlp."""
    f = sys._getframe(2)
    while f is not None:
        slf = f.f_locals.get("self")
        site = getattr(slf, "recap_site", None)
        if site is not None:
            return site
        suffix = _FRAME_SITES.get(f.f_code.co_name)
        if suffix is not None:
            layer = getattr(slf, "recap_layer", None)
            if layer:
                return (layer + suffix, "dropout")
        f = f.f_back
    return None


# ---- failures inside create_cudagraphs -------------------------------------------------------

def locate_in_megatron_graphs(tb) -> Optional[dict]:
    """Where a failure inside Megatron's graph creation happened: the innermost frame of
    _CudaGraphRunner.create_fwd_graph / create_bwd_graph or FullCudaGraphWrapper.__call__, whether
    inside its torch.cuda.graph block (capture) or not (warmup), the pass, and the layer."""
    hit = None
    while tb is not None:
        co = tb.tb_frame.f_code
        fn = co.co_filename.replace("\\", "/")
        if (fn.endswith("megatron/core/transformer/cuda_graphs.py") and co.co_name in ("create_fwd_graph", "create_bwd_graph")) or \
                (fn.endswith("megatron/core/full_cuda_graph.py") and co.co_name == "__call__"):
            hit = (tb.tb_frame, tb.tb_lineno, co)
        tb = tb.tb_next
    if hit is None:
        return None
    frame, lineno, co = hit
    slf = frame.f_locals.get("self")
    method = getattr(type(slf), co.co_name, None)
    capture, grad = torch_sut.graph_lines(method) if method is not None else (set(), set())
    phase = "capture" if lineno in capture else "warmup"
    if co.co_name == "create_bwd_graph":
        pass_ = "backward"
    elif co.co_name == "create_fwd_graph":
        pass_ = "backward" if lineno in grad else "forward"
    else:
        pass_ = ""
    base = getattr(slf, "base_module", None)
    layer = getattr(base, "recap_path", "") or getattr(base, "recap_layer", "")
    return {"phase": phase, "pass": pass_, "layer": layer, "function": f"{co.co_name}:{lineno}"}


# ---- construction refusals --------------------------------------------------------------------

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
]


class BuildFailure(Exception):
    """Megatron raised while building the model or its DDP wrapper, not a documented refusal."""

    def __init__(self, cause: BaseException, layer: str):
        super().__init__(str(cause))
        self.cause = cause
        self.layer = layer


def known_refusal(e: BaseException) -> bool:
    return isinstance(e, (AssertionError, ValueError)) and any(p in str(e) for p, _ in KNOWN_REFUSALS)


def _building_layer(tb) -> str:
    """The layer MegatronModel.__init__ was building when a traceback passed through it."""
    name = ""
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "__init__" and isinstance(tb.tb_frame.f_locals.get("self"), MegatronModel):
            v = tb.tb_frame.f_locals.get("name")
            name = v if isinstance(v, str) else name
        tb = tb.tb_next
    return name


# ---- one execution ---------------------------------------------------------------------------


class MegatronRunner(Runner):
    def __init__(self, sut: "MegatronSUT", c: case_mod.Case, data, configs, graphed_layers):
        self.api = sut.api
        self.configs = configs
        self.graphed_layers = graphed_layers
        super().__init__(sut, c, data)
        # Megatron's DistributedDataParallel (one rank), as a user wraps a model: it gives every
        # parameter a main_grad view into its grad buffer, which backward hooks (and 0.19's graphed
        # backwards) accumulate into; recap's gradients are read from main_grad
        # Built on the stream Megatron-LM's training.py builds it on (0.19: the shared full-iteration
        # capture stream, so the AccumulateGrad nodes DDP keeps do not name a non-capturing
        # stream; else a fresh stream), see megatron/training/training.py, get_model
        shared = getattr(self.api.full_cuda_graph, "get_shared_capture_stream", None)
        ddp_stream = shared() if (shared is not None and c.executor == "full-iteration") else torch.cuda.Stream()
        ddp_stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(ddp_stream):
            # the model's config (model_config_index): the schedule reads DDP's .config
            try:
                self.ddp = self.api.DDP(config=self.model.config, ddp_config=self.api.DDPConfig(), module=self.model)
            except Exception as e:
                if known_refusal(e):
                    raise torch_sut.SkipCase(f"megatron-core {sut.version} refuses the model at construction: "
                                             f"{torch_sut._one_line(str(e) or type(e).__name__)}") from None
                raise BuildFailure(e, "") from e
        torch.cuda.current_stream().wait_stream(ddp_stream)
        for p in self.params:
            p.grad = None
        self.fbf = self.api.get_forward_backward_func()
        self.full_wrapper = None
        self.num_tokens = torch.ones((), dtype=torch.int, device=self.dev)
        self.build_started = False
        self.rng_after_backwards = None
        for cfg in configs:
            cfg.finalize_model_grads_func = self._after_backwards
        self.pos.set(phase="", pass_="", layer="", microbatch=-1, step=-1)

    def make_model(self):
        c = self.case
        self.api.tensor_parallel.model_parallel_cuda_manual_seed(
            c.seed_rng, use_cudagraphable_rng=(c.generator == "graph-safe"), force_reset_rng=True)
        try:
            model = MegatronModel(self.api, c, self.dev, self.configs, self.graphed_layers)
        except Exception as e:
            if known_refusal(e):  # documented: skipped with Megatron's words
                raise torch_sut.SkipCase(f"megatron-core {self.sut.version} refuses the model at construction: "
                                         f"{torch_sut._one_line(str(e) or type(e).__name__)}") from None
            raise BuildFailure(e, _building_layer(e.__traceback__)) from e
        model.check_names(c)  # outside the try: a mismatch is this driver's bug, not a refusal
        return model

    def graph_resolvers(self) -> list:
        """Megatron's graphs: a layer's (CudaGraphManager's _CudaGraphRunner.create_fwd_graph /
        create_bwd_graph; the runner's base_module is one of the model's graphable modules) or the
        whole step's (FullCudaGraphWrapper.__call__)."""
        names = {id(m): (getattr(m, "recap_layer", None) or getattr(m, "recap_path", "")) for m in self.model.graphable}

        def label(graph) -> str:
            f = sys._getframe(1)
            while f is not None:
                co = f.f_code
                fn = co.co_filename.replace("\\", "/")
                if co.co_name in ("create_fwd_graph", "create_bwd_graph") and \
                        fn.endswith("megatron/core/transformer/cuda_graphs.py"):
                    base = getattr(f.f_locals.get("self"), "base_module", None)
                    name = names.get(id(base)) or getattr(base, "recap_layer", None) or getattr(base, "recap_path", "")
                    return (name or "").split(".")[0] or "?"
                if co.co_name == "__call__" and fn.endswith("megatron/core/full_cuda_graph.py") and \
                        type(f.f_locals.get("self")).__name__ == "FullCudaGraphWrapper":
                    return "iteration"
                f = f.f_back
            return ""

        return [label]

    # -- a step through forward_backward_func --

    def _after_backwards(self, *args, **kwargs):
        """finalize_model_grads_func: Megatron calls it after the step's backwards, right before
        create_cudagraphs(). The first time graphs are to be built, snapshot the RNG states and
        switch the observer to build mode."""
        if self.case.executor == "per-layer" and not self.build_started and any(self.graphed_layers):
            self.build_started = True
            self.rng_after_backwards = _rng_values(self.api)
            self._copy_grads(self._cur_mb)
            self.sync()
            gc.collect()
            torch.cuda.reset_peak_memory_stats()
            self.pos.set(phase="capture", pass_="", layer="", microbatch=-1)
            self.obs.mode = "build"
            self.obs.microbatch = -1
            _capture_spans.begin(self)

    def _copy_grads(self, m: int):
        if m < 0:
            return
        for i, p in enumerate(self.params):
            self.gbuf[m][i].copy_(self.model.recap_layout(i, p.main_grad))

    def body(self, call_layer) -> List[torch.Tensor]:
        c = self.case
        self.ddp.zero_grad_buffer()
        losses: List[Optional[torch.Tensor]] = [None] * c.microbatches
        state = {"m": -1, "peak": 0}
        self._cur_mb = -1
        graphs_replay = self.case.executor == "per-layer" and self.build_done

        def data():
            for m in range(c.microbatches):
                yield {"x": self.inp[m], "t": self.tgt[m]}

        def forward_step_func(data_iterator, model):
            prev = state["m"]
            if prev >= 0:  # microbatch prev's backward has run
                if graphs_replay:
                    self.obs.snapshot_graph_keys(prev)
                self._copy_grads(prev)
            m = prev + 1
            state["m"] = m
            self._cur_mb = m
            batch = next(data_iterator)
            self.obs.microbatch = m
            self.pos.set(pass_="forward", microbatch=m, layer="")
            a0 = self.obs.allocated()
            x = batch["x"].detach().requires_grad_(True)
            y = model(x)
            state["peak"] = max(state["peak"], max(0, self.obs.allocated() - a0))
            self.pos.set(pass_="backward", layer="")
            t = batch["t"]

            def loss_func(out):
                loss = layers_mod.mse_loss(out, t)
                losses[m] = loss
                return loss, self.num_tokens, {"loss": loss.detach()}

            return y, loss_func

        kw = dict(forward_step_func=forward_step_func, data_iterator=data(), model=self.ddp,
                  num_microbatches=c.microbatches, seq_length=c.tokens, micro_batch_size=1,
                  forward_only=False)
        fn = self.full_wrapper if self.full_wrapper is not None else self.fbf
        fn(**kw)
        if self.full_wrapper is not None:
            if state["m"] >= 0 and self.obs.mode == "build":  # this call captured the step
                self.static_losses = list(losses)
            elif state["m"] < 0:  # a replay: no Python ran, the losses are the captured tensors
                losses = list(self.static_losses or losses)
                state["m"] = c.microbatches - 1  # the graph copied the others' gradients
        last = state["m"]
        if graphs_replay:
            self.obs.snapshot_graph_keys(last)
        if not self.build_started or self.build_done or self.case.executor != "per-layer":
            self._copy_grads(last)
        if self.build_started and not self.build_done:
            self._end_megatron_build()
        self.body_activations = state["peak"]
        self.pos.set(pass_="", layer="", microbatch=-1)
        with torch.no_grad():
            for p in self.params:
                p.add_(p.main_grad, alpha=-c.lr)
        return losses

    build_done = False

    def _end_megatron_build(self):
        _capture_spans.end()
        self.build_done = True
        self.obs.mode = "live"
        self.sync()
        if self.rng_after_backwards is not None:
            _restore_rng_values(self.api, self.rng_after_backwards)
        m = self.record.memory
        m["capture_peak_bytes"] = int(max(0, torch.cuda.max_memory_allocated() - self.run_base))
        m["activations_in_graphs_bytes"] = int(_capture_spans.forward_bytes)
        m["graph_pool_bytes"] = int(observe.pool_bytes())

    # -- executors --

    def run(self) -> RunRecord:
        try:
            return super().run()
        finally:
            _capture_spans.end()

    def failure(self, e: BaseException, phase: str, mgc: Optional[dict] = None) -> dict:
        where = locate_in_megatron_graphs(torch_sut._root_exception(e).__traceback__) or \
            locate_in_megatron_graphs(e.__traceback__)
        f = super().failure(e, phase, None)
        if where is not None:
            f["phase"] = where["phase"]
            f["pass"] = where["pass"] or f["pass"]
            if where["layer"]:
                f["layer"] = where["layer"]
            f["message"] = torch_sut._one_line(f"{f['message']} (megatron-core {where['function']})")
        return f

    def _recover(self):
        super()._recover()
        # a capture that failed can leave the CUDA generator in capture mode ("Offset increment
        # outside graph capture"): then this process must not serve another case
        try:
            torch.empty(1, device=self.dev).uniform_()
            self.sync()
        except Exception as e:
            self.record.fatal = True
            print(f"recap worker: the CUDA generator is unusable after a failed capture: "
                  f"{torch_sut._one_line(str(e))}", file=sys.stderr)

    def _run_per_layer(self):
        # step 0 eagerly (CudaGraphManager records; graphs are made at its end), then replays
        c = self.case
        for s in range(c.steps):
            phase = "warmup" if s == 0 else "replay"
            try:
                rec = self.eager_step(s, "warmup") if s == 0 else self.replay_step(s)
                self.record.steps.append(rec)
            except Exception as e:
                self.record.failure = self.failure(e, "capture" if self.build_started and not self.build_done else phase)
                self.obs.mode = "live"
                self._recover()
                return

    def replay_step(self, step: int) -> StepRecord:
        t0 = time.perf_counter()
        self.pos.set(phase="replay", step=step)
        self.load_data(step)
        self.obs.begin_step()
        self.sync()
        torch.cuda.reset_peak_memory_stats()
        losses = self.body(self.call_replay)
        rec = self.finish(step, "replay", losses, t0, graph_keys=self.case.executor == "full-iteration")
        m = self.record.memory
        m["replay_peak_bytes"] = max(m["replay_peak_bytes"], torch.cuda.max_memory_allocated() - self.run_base)
        return rec

    def _run_full_iteration(self):
        c = self.case
        fcg = self.api.full_cuda_graph
        kw = {}
        if "use_single_mempool" in inspect.signature(fcg.FullCudaGraphWrapper.__init__).parameters:
            kw["use_single_mempool"] = True
        self.full_wrapper = fcg.FullCudaGraphWrapper(self.fbf, cuda_graph_warmup_steps=c.warmup, **kw)
        for s in range(c.steps):
            try:
                if s < c.warmup:
                    self.record.steps.append(self.eager_step(s, "warmup"))
                elif s == c.warmup:
                    # this call captures the whole step (inside Megatron's wrapper) and replays it
                    self.obs.mode = "build"
                    self.sync()
                    gc.collect()
                    torch.cuda.reset_peak_memory_stats()
                    t0 = time.perf_counter()
                    self.pos.set(phase="capture", step=s)
                    self.load_data(s)
                    self.obs.begin_step()
                    _capture_spans.begin(self)
                    losses = self.body(self.call_eager)
                    _capture_spans.end()
                    self.obs.mode = "live"
                    rec = self.finish(s, "replay", losses, t0, graph_keys=True)
                    m = self.record.memory
                    m["capture_peak_bytes"] = int(max(0, torch.cuda.max_memory_allocated() - self.run_base))
                    m["activations_in_graphs_bytes"] = int(self.body_activations)
                    m["graph_pool_bytes"] = int(observe.pool_bytes())
                    self.record.steps.append(rec)
                else:
                    self.record.steps.append(self.replay_step(s))
            except Exception as e:
                self.record.failure = self.failure(e, "capture" if s == c.warmup else ("warmup" if s < c.warmup else "replay"))
                self.obs.mode = "live"
                self._recover()
                return


def _rng_values(api) -> list:
    """The values (seed, offset) of every RNG state Megatron uses: the CPU generator, the CUDA
    default generator and each tracker state. By value: with use_cudagraphable_rng the tracker's
    states are generator objects the graphs registered, so they are restored in place."""
    out = [("cpu", None, torch.get_rng_state())]
    dev = torch.cuda.current_device()
    out.append(("cuda", None, torch.cuda.default_generators[dev].get_state()))
    tracker = api.tensor_parallel.get_cuda_rng_tracker()
    for name, st in tracker.get_states().items():
        if isinstance(st, torch.Generator):
            out.append(("gen", st, st.get_state()))
        else:
            out.append(("tensor", name, st.clone()))
    return out


def _restore_rng_values(api, values: list):
    tracker = api.tensor_parallel.get_cuda_rng_tracker()
    dev = torch.cuda.current_device()
    for kind, obj, v in values:
        if kind == "cpu":
            torch.set_rng_state(v)
        elif kind == "cuda":
            torch.cuda.default_generators[dev].set_state(v)
        elif kind == "gen":
            obj.set_state(v)
        else:
            tracker.states_[obj] = v


class _CaptureSpans:
    """Bytes each forward graph capture of Megatron's keeps allocated (its outputs and the
    activations its backward graph reads): torch.cuda.graph's __enter__/__exit__ are wrapped to
    read torch.cuda.memory_allocated() around captures made while a runner is building; nothing
    else is changed. The frame that opened the capture tells forward from backward graphs."""

    def __init__(self):
        self.runner = None
        self.forward_bytes = 0
        self._installed = False
        self._stack: List[Tuple[int, bool]] = []

    def install(self):
        if self._installed:
            return
        self._installed = True
        g = torch.cuda.graph
        enter, exit_ = g.__enter__, g.__exit__
        spans = self

        def __enter__(this):
            if spans.runner is not None:
                fwd = sys._getframe(1).f_code.co_name == "create_fwd_graph"
                spans._stack.append((spans.runner.obs.allocated(), fwd))
            return enter(this)

        def __exit__(this, *exc):
            r = exit_(this, *exc)
            if spans.runner is not None and spans._stack:
                a0, fwd = spans._stack.pop()
                if fwd:  # less the cuBLAS workspaces the capture made (MaskObserver.allocated)
                    spans.forward_bytes += max(0, spans.runner.obs.allocated() - a0)
            return r

        g.__enter__, g.__exit__ = __enter__, __exit__

    def begin(self, runner):
        self.install()
        self.runner = runner
        self.forward_bytes = 0
        self._stack = []

    def end(self):
        self.runner = None
        self._stack = []


_capture_spans = _CaptureSpans()


def build_failure_record(c: case_mod.Case, e: BuildFailure) -> RunRecord:
    """A failed run whose failure is Megatron's exception while building the model (phase
    "build": no step ran; error the exception's type, message its words)."""
    infos = case_mod.param_infos(c)
    rec = RunRecord([p.name for p in infos], [tuple(p.shape) for p in infos])
    cause = torch_sut._root_exception(e.cause)
    rec.failure = {"phase": "build", "pass": "", "layer": e.layer, "microbatch": -1, "step": -1, "api": "",
                   "error": type(cause).__name__,
                   "message": torch_sut._one_line(str(cause) or type(cause).__name__)}
    import traceback

    traceback.print_exception(type(e.cause), e.cause, e.cause.__traceback__, file=sys.stderr)
    return rec


# ---- the SUT ---------------------------------------------------------------------------------


class MegatronSUT(TorchSUT):
    name = "megatron"

    def __init__(self, device: str = "auto", expect_version: Optional[str] = None):
        self.version = megatron_version()
        if expect_version and self.version != expect_version:
            raise RuntimeError(f"megatron-core {self.version} is installed, {expect_version} was asked")
        super().__init__(device)
        if self.device.type != "cuda":
            raise RuntimeError("megatron-core needs CUDA: its RNG tracker and schedules call torch.cuda "
                               "(model_parallel_cuda_manual_seed, forward_backward_no_pipelining)")
        self.api = _Api()
        self.pool_uses = PoolUses(torch._C)  # M6: Megatron's unreleased graph-pool uses (pool_uses.py)
        self._init_parallel()
        observe.site_resolver = resolve_site

    def _init_parallel(self):
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
        # PR #3919 (in 0.16+): tensor_parallel.checkpoint runs the function without checkpointing
        # during graph warmup and capture: recap's "skip"; before it, CheckpointFunction always
        # checkpoints: recap's "naive"
        src = inspect.getsource(self.api.tensor_parallel.random.checkpoint)
        return "skip" if "is_graph_warmup" in src or "is_graph_capturing" in src else "naive"

    def capabilities(self) -> dict:
        return {
            "kinds": list(case_mod.LAYER_KINDS),
            "dtype": ["fp32", "bf16"],
            "executor": ["eager", "per-layer", "full-iteration"],
            "checkpoint": ["none", "full", "selective"],
            "checkpoint_style": ["reentrant"],
            "policy": [self.policy()],
            "generator": ["host", "graph-safe"],
            "device_state": [self.device_state],
            "warmup_backward": ["backward", "grad-of-inputs"],
            "shared_pool": [True],
            "microbatch_order": ["default"],
            "graphs": True,
            "per_layer": {"warmup_backward": ["grad-of-inputs"], "generator": ["graph-safe"]},
        }

    def hello(self) -> dict:
        return {"sut": self.name, "version": self.version, "device": self.device_name(),
                "capabilities": self.capabilities(),
                "framework": {"torch": torch.__version__, "megatron-core": self.version}}

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
                      gated_linear_unit=False, activation_func=_gelu_tanh, bias_activation_fusion=False,
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
            kw = {k: v for k, v in kw.items() if k in api.fields}
            try:
                cfg = api.TransformerConfig(**kw)
            except (AssertionError, ValueError, TypeError) as e:
                return [], [], (f"megatron-core {self.version} TransformerConfig rejects layer {i} ({l.kind}): "
                                f"{torch_sut._one_line(str(e) or type(e).__name__)}")
            out.append(cfg)
            graphed.append(g)
        return out, graphed, ""

    def why_skipped(self, c: case_mod.Case) -> str:
        if c.faults:
            return f"faults {', '.join(c.faults)}: fault points are recap's own runtime's (docs/faults.md)"
        if c.executor != "eager" and self.device.type != "cuda":
            return "executor: Megatron's graphs need CUDA"
        if c.any_checkpoint() and c.checkpoint_style != "reentrant":
            return (f"checkpoint_style {c.checkpoint_style}: this driver checkpoints with megatron-core's "
                    "tensor_parallel.checkpoint (CheckpointFunction) only")
        pol = self.policy()
        if c.any_checkpoint() and c.policy != pol:
            return (f"policy {c.policy}: megatron-core {self.version}'s tensor_parallel.checkpoint is recap's "
                    f"'{pol}' policy" + (" (it skips checkpointing during graph warmup and capture, PR #3919)"
                                         if pol == "skip" else " (it checkpoints in every phase)"))
        default = []
        for _ in range(c.microbatches):
            default += [1, -1]
        if c.order() != default:
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

    def _execute(self, c: case_mod.Case, data) -> RunRecord:
        configs, graphed, reason = self.configs(c)
        if reason:  # why_skipped checked it: the configs of a case do not change
            raise RuntimeError(reason)
        runner = None
        try:
            try:
                runner = MegatronRunner(self, c, data, configs, graphed)
            except BuildFailure as e:
                return build_failure_record(c, e)
            return runner.run()
        finally:
            del runner
            self._reset_megatron()
            self.after_case(c)

    def _reset_megatron(self):
        """Megatron keeps graph state in classes and module globals: clear it between cases."""
        api = self.api
        try:
            api.cuda_graphs.delete_cuda_graphs()
        except Exception:
            pass
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

