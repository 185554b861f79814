"""One rank of test_megatron_tp_layout (run as a script, not collected): megatron-core's own
TransformerLayer split over a tensor-parallel group of CPU processes (gloo), built, loaded and read
back through the megatron driver's MegatronModel (frameworks/megatron/model.py, shards.py), its
gradients assembled as the rank group's leader assembles them (core/ranks.py assemble) and compared
with recap's own torch block (core/layers.py) in fp32.

megatron-core runs on CUDA only; to run its tensor-parallel layers on the CPU three of its device
placements are redirected here, and nothing else: GlobalMemoryBuffer.get_tensor and
get_default_causal_mask allocate on torch.cuda.current_device() / "cuda", and the RNG tracker's
fork needs CUDA generator states (the cases draw nothing: dropout 0). What is under test is the
driver's layout of megatron's parameters, not megatron's numerics: on the GPU the driver runs
megatron unpatched.

argv: rank world port [qkv-blocks] — qkv-blocks plants a layout mistake (recap's [q | k | v] rows
taken for megatron's per-head interleave), which the comparison must catch.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import sys
from typing import Dict

import torch
import torch.distributed as dist

rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
planted = sys.argv[4] if len(sys.argv) > 4 else ""
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                        timeout=datetime.timedelta(seconds=120))

from megatron.core import utils as mutils  # noqa: E402
from megatron.core.transformer import utils as tutils  # noqa: E402

from recap_drivers import case as case_mod  # noqa: E402
from recap_drivers.core import layers as L  # noqa: E402
from recap_drivers.core.protocol import Frame  # noqa: E402
from recap_drivers.core.ranks import assemble  # noqa: E402
from recap_drivers.frameworks.megatron import shards  # noqa: E402
from recap_drivers.frameworks.megatron.api import Api, gelu_tanh  # noqa: E402
from recap_drivers.frameworks.megatron.model import MegatronModel  # noqa: E402

mutils.GlobalMemoryBuffer.get_tensor = lambda self, shape, dtype, *a, **k: torch.empty(shape, dtype=dtype)
tutils.get_default_causal_mask = lambda sq: torch.triu(torch.ones(sq, sq), diagonal=1).bool()
try:
    from megatron.core.fusions import fused_softmax

    fused_softmax.get_default_causal_mask = tutils.get_default_causal_mask  # imported by name there
except ImportError:
    pass
if planted == "qkv-blocks":
    def blocks(hidden: int, heads: int, tp: int = 1, r: int = 0) -> tuple:
        dh, local = hidden // heads, heads // tp
        return tuple(part * hidden + n * dh + d
                     for part in range(3) for n in range(r * local, (r + 1) * local) for d in range(dh))
    shards.qkv_rows = blocks  # type: ignore[assignment]

api = Api()
api.parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
api.tensor_parallel.get_cuda_rng_tracker().fork = lambda *a, **k: contextlib.nullcontext()
H, HEADS = 16, 4
c = case_mod.parse_case({"schema": "recap.case/1", "name": "layout", "hidden": H, "tokens": 8, "microbatches": 1,
                         "tp": world, "layers": [{"kind": "block", "heads": HEADS}, {"kind": "gelu"},
                                                 {"kind": "block", "heads": HEADS, "ffn_hidden": 32}]})
configs = [api.TransformerConfig(
    num_layers=1, hidden_size=H, num_attention_heads=HEADS, ffn_hidden_size=c.ffn(l), hidden_dropout=0.0,
    attention_dropout=0.0, add_bias_linear=True, gated_linear_unit=False, activation_func=gelu_tanh,
    bias_activation_fusion=False, bias_dropout_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
    apply_rope_fusion=False, layernorm_epsilon=L.NORM_EPS, normalization="LayerNorm", params_dtype=torch.float32,
    attention_softmax_in_fp32=False, apply_query_key_layer_scaling=False, use_cpu_initialization=True,
    perform_initialization=False, tensor_model_parallel_size=world) for l in c.layers]
model = MegatronModel(api, c, torch.device("cpu"), configs, [False] * len(c.layers), tp=world, tp_rank=rank)
model.check_names(c)
g = torch.Generator().manual_seed(5)
infos = case_mod.param_infos(c)
values = {p.name: torch.randn(tuple(p.shape), generator=g) * 0.3 for p in infos}
model.load(values)
x, t = torch.randn(8, H, generator=g), torch.randn(8, H, generator=g)
loss = L.mse_loss(model(x), t)
loss.backward()
table = model.shard_table()
mine = []
for i, (_, p) in enumerate(model.named):
    assert p.grad is not None
    mine.append([model.recap_layout(i, p.grad).contiguous(), model.recap_layout(i, p.detach()).contiguous()])
every: list = [None] * world
dist.all_gather_object(every, [[a.shape, a.numpy().tobytes(), b.numpy().tobytes()] for a, b in mine])
if rank == 0:
    ref = L.Model(c, torch.device("cpu"))
    ref.load(values)
    ref_loss = L.mse_loss(ref(x), t)
    ref_loss.backward()
    errs: Dict[str, Dict[str, float]] = {"grads": {}, "params": {}}
    for i, (name, p) in enumerate(ref.named):
        shape = tuple(infos[i].shape)
        assert p.grad is not None
        for what, k, want in (("grads", 1, p.grad), ("params", 2, values[name])):
            full = assemble([Frame(name, "f32", tuple(every[r][i][0]), every[r][i][k]) for r in range(world)],
                            table[i], shape, name)
            got = torch.frombuffer(bytearray(full.data), dtype=torch.float32).reshape(shape)
            errs[what][name] = float((got - want).norm() / want.norm().clamp_min(1e-30))
    out = {"loss": float(loss.detach()), "ref_loss": float(ref_loss.detach()), **errs,
           "split": sum(row["dim"] is not None for row in table)}
    print("RESULT " + json.dumps(out), flush=True)
dist.destroy_process_group()
