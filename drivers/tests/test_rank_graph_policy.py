"""Which graphed cases a torch rank group runs (frameworks/torch/tensor_parallel.py
TorchRankSUT.why_skipped, PROTOCOL.md section 10): per-layer graphs of stages and replicas whose
layers hold no collective, not of tensor-parallel layers, not with one shared pool over a stage's
1F1B order, never a whole step's graph. Judged as a CUDA worker would judge them (graphs on),
without a GPU: the policy reads the case and the group's shape only."""

from __future__ import annotations

import unittest

from tests.helpers import HAVE_TORCH


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class GraphsAcrossRanksPolicy(unittest.TestCase):
    def sut(self, pp: int, dp: int) -> object:
        from recap_drivers.frameworks.torch.tensor_parallel import TorchRankSUT

        s = TorchRankSUT("cpu", 0, 4)
        s.graphs = True  # as on CUDA: the group lists per-layer graphs
        s.pp, s.dp = pp, dp
        return s

    def case(self, **kw: object) -> object:
        from recap_drivers import case as case_mod

        d = {"schema": "recap.case/1", "name": "g", "hidden": 8, "tokens": 4, "microbatches": 4,
             "executor": "per-layer", "warmup_backward": "grad-of-inputs", "shared_pool": False,
             "layers": [{"kind": "block", "heads": 2, "graphed": True}, {"kind": "mlp", "graphed": True},
                        {"kind": "gelu"}, {"kind": "dropout", "dropout": 0.1, "graphed": True}]}
        d.update(kw)
        return case_mod.parse_case(d)

    def test_the_group_lists_per_layer_graphs_on_cuda(self) -> None:
        self.assertEqual(self.sut(1, 1).capabilities()["executor"], ["eager", "per-layer"])  # type: ignore[attr-defined]

    def test_stages_and_replicas_of_one_rank_run_them(self) -> None:
        for pp, dp, kw in ((4, 1, {"pp": 4}), (2, 2, {"pp": 2, "dp": 2}), (1, 4, {"dp": 4})):
            with self.subTest(pp=pp, dp=dp):
                self.assertEqual(self.sut(pp, dp).why_skipped(self.case(**kw)), "")  # type: ignore[attr-defined]

    def test_tensor_parallel_layers_are_not_graphed(self) -> None:
        why = self.sut(1, 1).why_skipped(self.case(tp=4, layers=[{"kind": "gelu", "graphed": True}]))  # type: ignore[attr-defined]
        self.assertIn("per-layer with tp 4", why)

    def test_one_shared_pool_cannot_follow_a_stage_order(self) -> None:
        why = self.sut(4, 1).why_skipped(self.case(pp=4, shared_pool=True))  # type: ignore[attr-defined]
        self.assertIn("shared_pool with pp 4", why)
        # one microbatch: the stage's order is its forward then its backward, as one call captures
        self.assertEqual(self.sut(4, 1).why_skipped(self.case(pp=4, shared_pool=True, microbatches=1)), "")  # type: ignore[attr-defined]

    def test_a_whole_steps_graph_is_not_run(self) -> None:
        why = self.sut(4, 1).why_skipped(self.case(pp=4, executor="full-iteration"))  # type: ignore[attr-defined]
        self.assertIn("per-layer graphs only", why)

    def test_a_replicas_share_of_microbatches_must_fill_the_interleaved_groups(self) -> None:
        # dp 2 of 8 microbatches: each replica's stages run 4, two groups of pp 2; of 6: 3, whose last
        # group megatron's interleaved schedule refuses (smaller than pp)
        eager = {"executor": "eager", "pp": 2, "vp": 2, "dp": 2}
        self.assertEqual(self.sut(2, 2).why_skipped(self.case(microbatches=8, **eager)), "")  # type: ignore[attr-defined]
        why = self.sut(2, 2).why_skipped(self.case(microbatches=6, **eager))  # type: ignore[attr-defined]
        self.assertIn("3 microbatches are not a multiple of 2", why)


if __name__ == "__main__":
    unittest.main()
