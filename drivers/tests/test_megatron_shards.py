"""The megatron rank group's parameter parts (frameworks/megatron/shards.py) and skip policy
(frameworks/megatron/ranks.py), without megatron-core or a GPU: what each rank loads, what it
reports in recap's order, and that the leader's assembly (core/ranks.py assemble) gives recap's
parameter back."""

from __future__ import annotations

import unittest

import torch

from recap_drivers import case as case_mod
from recap_drivers.core.protocol import Frame
from recap_drivers.core.ranks import assemble
from recap_drivers.frameworks.megatron.ranks import megatron_tp_problem, tp_sites
from recap_drivers.frameworks.megatron.shards import Shard, block_shards, qkv_rows, shard_row

H, HEADS, FFN = 16, 4, 48
SHAPES = {".ln1.weight": (H,), ".ln1.bias": (H,), ".attn.qkv.weight": (3 * H, H), ".attn.qkv.bias": (3 * H,),
          ".attn.proj.weight": (H, H), ".attn.proj.bias": (H,), ".ln2.weight": (H,), ".ln2.bias": (H,),
          ".mlp.fc1.weight": (FFN, H), ".mlp.fc1.bias": (FFN,), ".mlp.fc2.weight": (H, FFN), ".mlp.fc2.bias": (H,)}


def rank_part(full: torch.Tensor, shard: Shard) -> torch.Tensor:
    """What a rank holds (MegatronModel.load) and reports (MegatronModel.recap_layout)."""
    index = torch.tensor(shard.index, dtype=torch.long)
    local = full.index_select(shard.dim, index)  # megatron's order
    out = torch.empty_like(local)
    out.index_copy_(shard.dim, torch.tensor(shard.positions(), dtype=torch.long), local)
    return out


def frame(t: torch.Tensor, name: str) -> Frame:
    t = t.contiguous().float()
    return Frame(name, "f32", tuple(t.shape), t.numpy().tobytes())


class ShardTest(unittest.TestCase):
    def test_one_rank_qkv_is_megatrons_per_head_interleave(self) -> None:
        # the one-rank driver's permutation: row r of linear_qkv holds recap's row perm[r], per
        # head [q(dh) k(dh) v(dh)]
        dh = H // HEADS
        expected = [part * H + n * dh + d for n in range(HEADS) for part in range(3) for d in range(dh)]
        self.assertEqual(list(qkv_rows(H, HEADS)), expected)
        self.assertEqual(sorted(expected), list(range(3 * H)))

    def test_every_split_assembles_to_recaps_parameter(self) -> None:
        g = torch.Generator().manual_seed(7)
        for tp in (2, 4):
            every = [block_shards(H, HEADS, FFN, tp, r) for r in range(tp)]
            for suffix, shape in SHAPES.items():
                with self.subTest(tp=tp, param=suffix):
                    full = torch.randn(shape, generator=g)
                    shards = [e[suffix] for e in every]
                    row = shard_row(0, shards)
                    if row["dim"] is None:
                        self.assertTrue(all(s is None for s in shards))
                        continue
                    parts = [frame(rank_part(full, s), suffix) for s in shards if s is not None]
                    got = assemble(parts, row, shape, suffix)
                    back = torch.frombuffer(bytearray(got.data), dtype=torch.float32).reshape(shape)
                    self.assertTrue(torch.equal(back, full), f"{suffix} tp {tp}: assembled parameter differs")

    def test_a_rank_holds_its_heads_q_k_and_v_rows(self) -> None:
        dh = H // HEADS
        s = block_shards(H, HEADS, FFN, 2, 1)[".attn.qkv.weight"]
        assert s is not None
        # heads 2 and 3: rows 8..16 of each of q, k and v
        self.assertEqual(s.ranges(), [(2 * dh, 4 * dh), (H + 2 * dh, H + 4 * dh), (2 * H + 2 * dh, 2 * H + 4 * dh)])
        self.assertFalse(s.in_order())
        self.assertTrue(block_shards(H, HEADS, FFN, 2, 1)[".mlp.fc1.weight"].in_order())  # type: ignore[union-attr]

    def test_ranks_that_split_differently_are_refused(self) -> None:
        with self.assertRaises(ValueError):
            shard_row(3, [Shard(0, (0, 1)), Shard(1, (2, 3))])


def case_of(layers: list, **kw: object) -> case_mod.Case:
    d = {"schema": "recap.case/1", "name": "t", "hidden": H, "tokens": 8, "microbatches": 2,
         "layers": layers}
    d.update(kw)
    return case_mod.parse_case(d)


class SkipPolicyTest(unittest.TestCase):
    def test_blocks_split_when_heads_and_ffn_divide(self) -> None:
        c = case_of([{"kind": "block", "heads": 4, "dropout": 0.1}, {"kind": "dropout", "dropout": 0.1}])
        self.assertEqual(megatron_tp_problem(c, 2), "")
        self.assertIn("3 heads, not a multiple of 2",
                      megatron_tp_problem(case_of([{"kind": "block", "heads": 3}], hidden=12), 2))

    def test_recaps_own_modules_with_parameters_are_not_split(self) -> None:
        why = megatron_tp_problem(case_of([{"kind": "mlp"}]), 2)
        self.assertIn("mlp0 (mlp) is recap's own module", why)
        self.assertEqual(megatron_tp_problem(case_of([{"kind": "layernorm"}]), 2), "")
        self.assertIn("replicated norm", megatron_tp_problem(case_of([{"kind": "layernorm"}], sp=True, tp=2), 2))

    def test_sites_inside_regions(self) -> None:
        c = case_of([{"kind": "block", "heads": 4, "dropout": 0.1}, {"kind": "dropout", "dropout": 0.1}])
        self.assertEqual(tp_sites(c, False), ["block0.attn.core"])
        self.assertEqual(tp_sites(c, True), ["block0.attn.core", "block0.drop1", "block0.mlp.dropout", "dropout1"])


if __name__ == "__main__":
    unittest.main()
