"""recap's layers as the Megatron modules a user builds: `block` as TransformerLayer, the
smaller kinds (core/layers.py) checkpointed with tensor_parallel.checkpoint and, when graphed,
as GraphableMegatronModule (CudaGraphManager captures them); recap's parameter list and layout."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from ... import case as case_mod
from ...core import layers as layers_mod
from .api import Api
from .shards import Shard, block_shards, shard_row


class MegatronCheckpoint(layers_mod.Checkpoint):
    """megatron-core's tensor_parallel.checkpoint (CheckpointFunction, reentrant) around a module."""

    def __init__(self, api: Api, inner: nn.Module):
        super().__init__(inner, use_reentrant=True)
        self.api = api

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.api.tensor_parallel.checkpoint(self.inner, False, x)


def _make_small_layer_class(api: Api) -> Any:
    base: Any = api.GraphableMegatronModule  # megatron-core's class, known once it is imported

    class SmallLayer(layers_mod.Observed, base):
        """One of recap's smaller kinds as a Megatron module: graphable by CudaGraphManager when
        its config says cuda_graph_impl "local"."""

        def __init__(self, config: Any, inner: nn.Module, name: str) -> None:  # config: a TransformerConfig
            super().__init__(config)
            self.inner = inner
            self.recap_path = name

        def recap_params(self) -> List[Tuple[str, nn.Parameter]]:
            return layers_mod.recap_params_of(self.inner)

        def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
            # Megatron's graphed modules pass [s, b, h] (b = 1) between them; recap's layers [T, h]
            self.enter_layer(self.recap_path)
            return self.inner(hidden_states.squeeze(1)).unsqueeze(1)

    return SmallLayer


def _first(out: Any) -> torch.Tensor:
    """CudaGraphManager returns a tuple of outputs; TransformerLayer returns (output, context)."""
    return out[0] if isinstance(out, tuple) else out


class BlockLayer(layers_mod.Observed, nn.Module):
    """recap's `block` as Megatron's TransformerLayer; [tokens, hidden] <-> Megatron's [s, b, h]."""

    def __init__(self, api: Api, layer: Any, name: str, full_checkpoint: bool) -> None:  # layer: a TransformerLayer
        super().__init__()
        self.api = api
        self.layer = layer
        self.recap_path = name
        self.full_checkpoint = full_checkpoint

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # [s, b, h]
        self.enter_layer(self.recap_path)
        if self.full_checkpoint:
            # TransformerBlock._checkpointed_forward, recompute_method "uniform", one layer a unit
            layer = self.layer

            def custom(hidden_states: torch.Tensor) -> torch.Tensor:
                return _first(layer(hidden_states=hidden_states, attention_mask=None))

            return self.api.tensor_parallel.checkpoint(custom, False, h)
        return _first(self.layer(hidden_states=h, attention_mask=None))


class MegatronModel(layers_mod.RecapParamList):
    """The stack as the `model` forward_backward_func drives, with recap's parameter list."""

    def __init__(self, api: Api, c: case_mod.Case, device: torch.device, configs: List[Any],
                 graphed_layers: List[bool], tp: int = 1, tp_rank: int = 0, sp: bool = False,
                 span: Optional[Tuple[int, int]] = None, first: bool = True, last: bool = True,
                 vp_stages: Optional[List[int]] = None) -> None:
        super().__init__()
        self.api = api
        self.case = c
        # a rank of a tensor-parallel group (frameworks/megatron/ranks.py): its blocks hold their
        # part of each split parameter (shards.py); with sp the layers run on its rows
        self.tp, self.tp_rank, self.sp = tp, tp_rank, sp
        # a pipeline stage: it runs layers span[0] .. span[1] - 1 (every layer is built, so that each
        # rank's observation has recap's whole parameter list); the first takes the microbatch, the
        # others the activation the schedule received (set_input_tensor); the last returns the
        # output the loss is computed on, the others the [s, b, h] activation the schedule sends on.
        # What megatron's finalize_model_grads reads of a GPTModel's stages: pre_process,
        # share_embeddings_and_output_weights (no embedding here: nothing to all-reduce).
        # With virtual stages (vp_stages: each layer's model chunk) the rank's chunks
        # (MegatronChunk) run their spans of these layers instead; TransformerLayer takes its
        # chunk (vp_stage), as get_transformer_layer_offset asserts once the config names vp.
        self.span = span if span is not None else (0, len(c.layers))
        self.pre_process, self.post_process = first, last
        self.share_embeddings_and_output_weights = False
        self.input_tensor: Optional[torch.Tensor] = None
        # set by a pipeline stage's runner: marks the stage's output, whose backward starts the
        # stage's backward of a microbatch (ranks.py); None: nothing marked
        self.mark: Optional[Any] = None
        self.every: List[List[Optional[Shard]]] = []  # per parameter: every rank's Shard
        self.config = configs[model_config_index(graphed_layers)] if configs else None
        self.model_type = api.ModelType.encoder_or_decoder
        SmallLayer = _make_small_layer_class(api)
        self.layers = nn.ModuleList()
        self.graphable = nn.ModuleList()  # the Megatron modules that own a CudaGraphManager
        self.named: List[Tuple[str, nn.Parameter]] = []
        # per parameter: None (held whole, in recap's order) or (dim, index, positions): the
        # rank's indices of recap's parameter along dim, and where each goes in recap's order
        # (None: already in it)
        self.loaders: List[Optional[Tuple[int, torch.Tensor, Optional[torch.Tensor]]]] = []
        dt = layers_mod.TORCH_DTYPES[c.dtype]
        for i, l in enumerate(c.layers):
            name = f"{l.kind}{i}"
            cfg = configs[i]
            if l.kind == "block":
                vp = {} if vp_stages is None else {"vp_stage": vp_stages[i]}
                tl = api.TransformerLayer(cfg, api.local_spec().submodules, layer_number=1, **vp)
                tl.to(device=device, dtype=dt)
                for m in tl.modules():
                    m.recap_path = name
                core = tl.self_attention.core_attention
                core.recap_site = (name + ".attn.core", "attn_dropout")
                tl.recap_layer = name
                self.layers.append(BlockLayer(api, tl, name, l.checkpoint == "full"))
                self.graphable.append(tl)
                self._block_params(name, tl, c.hidden, l.heads, c.ffn(l))
            else:
                wrap = layers_mod.make_wrap(c, i, lambda m: MegatronCheckpoint(api, m))
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
                    self.every.append([None] * tp)
        # forward_backward_func's set_current_microbatch looks for model.decoder.layers
        self.decoder = _Decoder(self.graphable)

    def _block_params(self, name: str, tl: Any, hidden: int, heads: int, ffn: int) -> None:  # tl: a TransformerLayer
        sa, mlp = tl.self_attention, tl.mlp
        table = [
            (".ln1.weight", tl.input_layernorm.weight), (".ln1.bias", tl.input_layernorm.bias),
            (".attn.qkv.weight", sa.linear_qkv.weight), (".attn.qkv.bias", sa.linear_qkv.bias),
            (".attn.proj.weight", sa.linear_proj.weight), (".attn.proj.bias", sa.linear_proj.bias),
            (".ln2.weight", tl.pre_mlp_layernorm.weight), (".ln2.bias", tl.pre_mlp_layernorm.bias),
            (".mlp.fc1.weight", mlp.linear_fc1.weight), (".mlp.fc1.bias", mlp.linear_fc1.bias),
            (".mlp.fc2.weight", mlp.linear_fc2.weight), (".mlp.fc2.bias", mlp.linear_fc2.bias),
        ]
        every = [block_shards(hidden, heads, ffn, self.tp, r) for r in range(self.tp)]
        dev = tl.input_layernorm.weight.device
        for suffix, p in table:
            self.named.append((name + suffix, p))
            self.every.append([e[suffix] for e in every])
            mine = every[self.tp_rank][suffix]
            if mine is None:
                self.loaders.append(None)
                continue
            index = torch.tensor(mine.index, dtype=torch.long, device=dev)
            pos = None if mine.in_order() else torch.tensor(mine.positions(), dtype=torch.long, device=dev)
            self.loaders.append((mine.dim, index, pos))

    def shard_table(self) -> List[Dict[str, Any]]:
        """Per parameter (recap's index): the split dimension and every rank's ranges, or dim None
        (the rank group's `shards`, PROTOCOL.md "Rank groups")."""
        return [shard_row(i, e) for i, e in enumerate(self.every)]

    def layer_params(self, i: int) -> List[nn.Parameter]:
        return []

    def load(self, values: Dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for (n, p), ld in zip(self.named, self.loaders):
                v = values[n].to(p.device)
                if ld is not None:
                    v = v.index_select(ld[0], ld[1])
                p.copy_(v.to(p.dtype))

    # A gradient or value of parameter i in recap's layout (qkv rows back in recap's order; a
    # rank's part in recap's order): what the observation reports for both (the parameters too:
    # the fp64 training oracle loads them)
    def recap_layout(self, i: int, g: torch.Tensor) -> torch.Tensor:
        ld = self.loaders[i]
        if ld is None or ld[2] is None:
            return g
        out = torch.empty_like(g)
        out.index_copy_(ld[0], ld[2], g)  # on the device: this may run inside a capture
        return out

    def set_input_tensor(self, tensor: Any) -> None:
        """The schedule's received activation (a list of one, as GPTModel.set_input_tensor takes it;
        [None] on the first stage)."""
        self.input_tensor = tensor[0] if isinstance(tensor, list) else tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [T, h] in and out, [T, 1, h] between the layers
        return self.run_span(x, self.input_tensor, self.span, self.post_process, self.mark)

    def run_span(self, x: torch.Tensor, received: Optional[torch.Tensor], span: Tuple[int, int], last: bool,
                 mark: Optional[Any]) -> torch.Tensor:
        """Layers span[0] .. span[1] - 1 on the microbatch x, or on the activation a previous stage
        sent (received); the output the loss takes when last, else what the schedule sends on."""
        tp = self.api.tensor_parallel
        if received is not None:  # a later pipeline stage: the previous stage's activation
            h = received
        else:
            h = x.unsqueeze(1)
            if self.sp:
                # sequence parallel: each rank runs its rows between the first and the last layer,
                # as GPTModel's embedding scatters them and its output layer gathers them
                h = tp.scatter_to_sequence_parallel_region(h)
        if self.sp:
            # TransformerBlock.forward runs its layers inside the tracker's fork when
            # sequence_parallel is set: dropout on a rank's rows draws from the rank's own state
            with tp.get_cuda_rng_tracker().fork():
                h = self._layers(h, span)
        else:
            h = self._layers(h, span)
        if mark is not None:
            h = mark(h)
        if not last:
            return h  # [s, b, h] (the rank's rows with sp): what the schedule sends to the next stage
        if self.sp:
            # the loss is on the whole output on every rank, so the gather's backward takes the
            # rank's rows (tensor_parallel_output_grad=False), not a reduce-scatter of equal gradients
            h = tp.gather_from_sequence_parallel_region(h, tensor_parallel_output_grad=False)
        return h.squeeze(1)

    def _layers(self, h: torch.Tensor, span: Tuple[int, int]) -> torch.Tensor:
        for l in self.layers[span[0]:span[1]]:
            h = _first(l(hidden_states=h)) if isinstance(l, self.api.GraphableMegatronModule) else l(h)
        return h


class MegatronChunk(nn.Module):
    """One model chunk of a rank with virtual pipeline stages: what the interleaved schedule takes
    as model[k] (and DDP wraps, as Megatron-LM's get_model wraps each chunk). It holds the whole
    model's layers of its span, so its parameters are its span's; it runs them through the
    whole model (held outside the module tree: MegatronModel.run_span)."""

    def __init__(self, whole: MegatronModel, span: Tuple[int, int], chunk: int, first: bool, last: bool) -> None:
        super().__init__()
        self._whole = [whole]  # a list: not a submodule (its other layers are other chunks')
        self.span, self.vp_stage = span, chunk
        self.pre_process, self.post_process = first, last
        self.share_embeddings_and_output_weights = False
        self.config, self.model_type = whole.config, whole.model_type
        self.layers = nn.ModuleList(whole.layers[span[0]:span[1]])
        self.decoder = _Decoder(nn.ModuleList(m for m in whole.graphable
                                              if any(m is l or m in list(l.modules()) for l in self.layers)))
        self.input_tensor: Optional[torch.Tensor] = None
        self.mark: Optional[Any] = None

    def set_input_tensor(self, tensor: Any) -> None:
        self.input_tensor = tensor[0] if isinstance(tensor, list) else tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # chunk 0 of the first stage takes the microbatch; every other chunk what it received
        received = None if self.pre_process else self.input_tensor
        return self._whole[0].run_span(x, received, self.span, self.post_process, self.mark)


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


class _Plain(layers_mod.Observed, nn.Module):
    def __init__(self, inner: nn.Module, name: str) -> None:
        super().__init__()
        self.inner = inner
        self.recap_path = name

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        self.enter_layer(self.recap_path)
        return self.inner(hidden_states.squeeze(1)).unsqueeze(1)


class _Decoder(nn.Module):
    def __init__(self, layers: nn.ModuleList) -> None:
        super().__init__()
        self.layers = layers


def _building_layer(tb: Optional[TracebackType]) -> str:
    """The layer MegatronModel.__init__ was building when a traceback passed through it."""
    name = ""
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "__init__" and isinstance(tb.tb_frame.f_locals.get("self"), MegatronModel):
            v = tb.tb_frame.f_locals.get("name")
            name = v if isinstance(v, str) else name
        tb = tb.tb_next
    return name
