"""One rank of test_megatron_tp_layout (run as a script, not collected): megatron-core's own
TransformerLayer split over tp tensor-parallel ranks and pp pipeline stages, on dp data-parallel
replicas (world / (tp * pp)) of CPU processes (gloo), built, loaded and read back through the megatron driver's MegatronModel
(frameworks/megatron/model.py, shards.py), stepped by megatron's own get_forward_backward_func()
(forward_backward_no_pipelining, or 1F1B with stages) over its DistributedDataParallel, with
megatron's finalize_model_grads after the backwards (as frameworks/megatron/ranks.py runs a rank;
a replica runs its share of the microbatches, as frameworks/torch/data_parallel.py local_data gives
it, and finalize sums the replicas' gradients).
Each stage's output is marked as ranks.py marks it, so the order of the stage's forwards and
backwards is what ran. Rank 0 gathers every rank's parts, assembles them as the rank group's
leader does (core/ranks.py assemble) and compares with recap's own torch model (fp32).

megatron-core runs on CUDA only; to run it on the CPU, its device placements are redirected here,
and nothing else: torch.cuda.current_device / current_stream / synchronize, GlobalMemoryBuffer,
get_default_causal_mask, the schedules' `device="cuda"` literals (their source re-executed with
"cpu"), and the RNG tracker's fork (it needs CUDA generator states; the cases draw nothing). What
is under test is the driver's side (layout, stages, the mark), not megatron's numerics: on the GPU
the driver runs megatron unpatched.

With vp > 1 each rank runs vp model chunks (MegatronChunk, each wrapped by its own DDP) in
megatron's interleaved schedule, as ranks.py runs them.

argv: rank world port tp pp vp [planted] — planted `qkv-blocks` (recap's [q | k | v] rows taken for
megatron's per-head interleave), `stage-layers-swapped` (each stage runs the next stage's layers) or
`chunks-contiguous` (chunk k of stage s holds virtual stage s * vp + k, not k * pp + s), which the
comparison must catch; or `mcore-p2p-defaults`: megatron-core's own p2p defaults with virtual
stages (finding M12, results/FINDINGS.md: with pp 2 they swap activations and gradients).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import sys
import types
from typing import Any, Dict, Iterator, List

import torch
import torch.distributed as dist

rank, world, port, TP, PP, VP = (int(a) for a in sys.argv[1:7])
planted = sys.argv[7] if len(sys.argv) > 7 else ""
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=120))

# megatron's device placements, redirected to the CPU (the docstring)
torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
torch.cuda.synchronize = lambda *a, **k: None
torch.cuda.current_stream = lambda *a, **k: types.SimpleNamespace(  # type: ignore[assignment]
    wait_event=lambda e: None, wait_stream=lambda s: None)
import megatron.core.pipeline_parallel.schedules as schedules  # noqa: E402

with open(schedules.__file__) as f:
    exec(compile(f.read().replace('device="cuda"', 'device="cpu"'), schedules.__file__, "exec"), schedules.__dict__)
from megatron.core import utils as mutils  # noqa: E402
from megatron.core.transformer import utils as tutils  # noqa: E402

mutils.GlobalMemoryBuffer.get_tensor = lambda self, shape, dtype, *a, **k: torch.empty(shape, dtype=dtype)
tutils.get_default_causal_mask = lambda sq: torch.triu(torch.ones(sq, sq), diagonal=1).bool()
try:
    from megatron.core.fusions import fused_softmax

    fused_softmax.get_default_causal_mask = tutils.get_default_causal_mask  # imported by name there
except ImportError:
    pass

from recap_drivers import case as case_mod  # noqa: E402
from recap_drivers.core import layers as L  # noqa: E402
from recap_drivers.core.layout import Layout, layer_chunks, stage_layers  # noqa: E402
from recap_drivers.core.protocol import Frame  # noqa: E402
from recap_drivers.core.ranks import assemble  # noqa: E402
from recap_drivers.core.schedules import stage_order  # noqa: E402
from recap_drivers.frameworks.megatron import shards  # noqa: E402
from recap_drivers.frameworks.megatron.api import Api, gelu_tanh  # noqa: E402
from recap_drivers.frameworks.megatron.model import MegatronChunk, MegatronModel  # noqa: E402
from recap_drivers.frameworks.megatron.ranks import _BackwardStarts  # noqa: E402

if planted == "qkv-blocks":
    def blocks(hidden: int, heads: int, tp: int = 1, r: int = 0) -> tuple:
        dh, local = hidden // heads, heads // tp
        return tuple(part * hidden + n * dh + d
                     for part in range(3) for n in range(r * local, (r + 1) * local) for d in range(dh))
    shards.qkv_rows = blocks  # type: ignore[assignment]

api = Api()
api.parallel_state.initialize_model_parallel(tensor_model_parallel_size=TP, pipeline_model_parallel_size=PP,
                                             virtual_pipeline_model_parallel_size=VP if VP > 1 else None)
api.tensor_parallel.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
DP = world // (TP * PP)
lay = Layout(TP, DP, PP, rank)
H, HEADS, M, T = 16, 4, 4, 8  # (M: a multiple of pp, as the interleaved schedule needs)
c = case_mod.parse_case({"schema": "recap.case/1", "name": "layout", "hidden": H, "tokens": T, "microbatches": M,
                         "tp": TP, "pp": PP, "vp": VP,
                         "layers": [{"kind": "block", "heads": HEADS}, {"kind": "gelu"},
                                    {"kind": "block", "heads": HEADS, "ffn_hidden": 32}, {"kind": "layernorm"}]})
par: Dict[str, Any] = {"tensor_model_parallel_size": TP, "num_layers": 1}
if PP > 1:  # as MegatronRankSUT.parallel_config
    par.update(pipeline_model_parallel_size=PP, num_layers=len(c.layers), pipeline_dtype=torch.float32)
if VP > 1:  # as MegatronRankSUT.parallel_config (Megatron-LM's p2p settings for interleaving)
    par["virtual_pipeline_model_parallel_size"] = VP
    if planted != "mcore-p2p-defaults":  # megatron-core's own defaults instead: finding M12
        par.update(overlap_p2p_comm=True, batch_p2p_comm=False)
configs = [api.TransformerConfig(
    hidden_size=H, num_attention_heads=HEADS, ffn_hidden_size=c.ffn(l), hidden_dropout=0.0,
    attention_dropout=0.0, add_bias_linear=True, gated_linear_unit=False, activation_func=gelu_tanh,
    bias_activation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
    apply_rope_fusion=False, layernorm_epsilon=L.NORM_EPS, normalization="LayerNorm", params_dtype=torch.float32,
    attention_softmax_in_fp32=False, apply_query_key_layer_scaling=False, use_cpu_initialization=True,
    perform_initialization=False, calculate_per_token_loss=True, **par) for l in c.layers]
every_span = stage_layers(len(c.layers), PP, VP)
if planted == "chunks-contiguous":
    spans = [every_span[lay.stage * VP + k] for k in range(VP)]
else:  # virtual stage k * pp + stage (stage-layers-swapped: the next stage's)
    spans = [every_span[k * PP + (lay.stage + (planted == "stage-layers-swapped")) % PP] for k in range(VP)]
vp_stages = layer_chunks(len(c.layers), PP, VP) if VP > 1 else None
model = MegatronModel(api, c, torch.device("cpu"), configs, [False] * len(c.layers), tp=TP, tp_rank=lay.tp_rank,
                      span=spans[0], first=lay.stage == 0, last=lay.stage == PP - 1, vp_stages=vp_stages)
model.check_names(c)
g = torch.Generator().manual_seed(5)
infos = case_mod.param_infos(c)
values = {p.name: torch.randn(tuple(p.shape), generator=g) * 0.3 for p in infos}
model.load(values)
xs = [torch.randn(T, H, generator=g) for _ in range(M)]
ts = [torch.randn(T, H, generator=g) for _ in range(M)]
K = M // DP  # the replica's microbatches: the step's lay.replica * K ..
mine_mb = list(range(lay.replica * K, (lay.replica + 1) * K))
events: List[List[Any]] = []
current = {"forward": -1}
# as ranks.py: with vp the chunks (MegatronChunk), each its own DDP; else the model
chunks: List[Any] = [MegatronChunk(model, span, k, first=lay.stage == 0 and k == 0,
                                   last=lay.stage == PP - 1 and k == VP - 1) for k, span in enumerate(spans)] \
    if VP > 1 else [model]
if PP > 1:
    for k, ch in enumerate(chunks):
        ch.mark = (lambda k: lambda h: _BackwardStarts.apply(
            h, current["forward"], lambda m: events.append(["backward", m, k])))(k)
ddps = [api.DDP(config=ch.config, ddp_config=api.DDPConfig(), module=ch) for ch in chunks]
fwd_count = [0] * len(ddps)
for d in ddps:
    d.zero_grad_buffer()
for cfg in configs:
    cfg.finalize_model_grads_func = lambda mdl, num_tokens, **kw: api.finalize_model_grads(mdl, None, **kw)
losses: Dict[int, float] = {}


def data() -> Iterator[Dict[str, torch.Tensor]]:
    for m in mine_mb:
        yield {"x": xs[m], "t": ts[m]}


def forward_step(it: Iterator[Dict[str, torch.Tensor]], mdl: Any) -> Any:
    k = [i for i, d in enumerate(ddps) if d is mdl][0]  # the chunk (each takes its microbatches in order)
    m = current["forward"] = fwd_count[k]
    fwd_count[k] += 1
    events.append(["forward", m, k])
    b = next(it)
    y = mdl(b["x"].detach().requires_grad_(True))

    def loss_func(out: torch.Tensor) -> Any:
        loss = L.mse_loss(out, b["t"])
        losses[mine_mb[m]] = float(loss.detach())
        return loss, torch.ones((), dtype=torch.int), {"loss": loss.detach()}
    return y, loss_func


api.get_forward_backward_func()(forward_step_func=forward_step, data_iterator=[data() for _ in ddps] if VP > 1 else data(),
                                model=ddps if VP > 1 else ddps[0], num_microbatches=K,
                                seq_length=T, micro_batch_size=1, forward_only=False)
table = model.shard_table()
mine = {}
for i, (name, p) in enumerate(model.named):
    if any(a <= infos[i].layer < b for a, b in spans):
        main_grad = getattr(p, "main_grad")  # DDP's view into its grad buffer
        gr, val = model.recap_layout(i, main_grad).contiguous(), model.recap_layout(i, p.detach()).contiguous()
        mine[i] = [list(gr.shape), gr.numpy().tobytes(), val.numpy().tobytes()]
every: list = [None] * world
dist.all_gather_object(every, {"parts": mine, "losses": losses, "events": events, "stage": lay.stage,
                               "replica": lay.replica})
if rank == 0:
    ref = L.Model(c, torch.device("cpu"))
    ref.load(values)
    ref_losses = []
    for m in range(M):
        loss = L.mse_loss(ref(xs[m]), ts[m])
        loss.backward()
        ref_losses.append(float(loss.detach()))
    errs: Dict[str, Dict[str, float]] = {"grads": {}, "params": {}}
    for i, (name, p) in enumerate(ref.named):
        shape = tuple(infos[i].shape)
        owners = [r for r in range(world) if i in every[r]["parts"] and every[r]["replica"] == 0]  # its stage's
        assert p.grad is not None
        for what, k, want in (("grads", 1, p.grad), ("params", 2, values[name])):
            full = assemble([Frame(name, "f32", tuple(every[r]["parts"][i][0]), every[r]["parts"][i][k]) for r in owners],
                            table[i], shape, name)
            got = torch.frombuffer(bytearray(full.data), dtype=torch.float32).reshape(shape)
            errs[what][name] = float((got - want).norm() / want.norm().clamp_min(1e-30))
    last_losses: Dict[int, float] = {}
    for r in range(world):
        if every[r]["stage"] == PP - 1:
            last_losses.update(every[r]["losses"])
    got_losses = [last_losses.get(m) for m in range(M)]
    order_ok = all(every[r]["events"] == [list(e) for e in stage_order(PP, every[r]["stage"], K, VP)]
                   for r in range(world)) if PP > 1 else True
    out = {"losses": got_losses, "ref_losses": ref_losses, **errs, "split": sum(row["dim"] is not None for row in table),
           "order_is_1f1b": order_ok}
    print("RESULT " + json.dumps(out), flush=True)
dist.destroy_process_group()
