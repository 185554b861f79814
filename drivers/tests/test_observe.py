"""Unit tests of the observers (core/observe) on the CPU: draws by index with their checkpoint flag, the frames that
make a draw checkpointed (torch's and megatron-core's, by code name and file), and the graph
observer's wrappers on a fake graph class (no CUDA needed)."""

from __future__ import annotations

import unittest

from recap_drivers.core.observe.graphs import GraphObserver
from recap_drivers.frameworks.torch.graphs import mgc_label
from tests.helpers import HAVE_TORCH

if HAVE_TORCH:
    import torch
    import torch.nn.functional as F

    from recap_drivers.core.observe.masks import MaskObserver


def _compiled(src: str, filename: str) -> dict:
    """Functions defined by `src` whose code objects carry `filename` (what the observer matches)."""
    g = {"__name__": "fake"}
    exec(compile(src, filename, "exec"), g)
    return g


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class DrawTest(unittest.TestCase):
    def setUp(self):
        self.obs = MaskObserver(torch.device("cpu"))
        self.obs.plan([(("site", "dropout", 0, "forward"), 16), (("site", "dropout", 0, "recompute"), 16)])
        self.obs.start()
        self.obs.begin_step()

    def tearDown(self):
        self.obs.stop()

    def drop(self, x):
        with self.obs.site("site", "dropout"):
            return F.dropout(x, 0.5, training=True)

    def test_two_draws_of_one_site_are_two_entries(self):
        x = torch.ones(16)
        a = self.drop(x)
        b = self.drop(x)
        masks = self.obs.collect(False)
        self.assertEqual([(m["pass"], m["index"], m["checkpointed"], m["draws"]) for m in masks],
                         [("forward", 0, False, 1), ("forward", 1, False, 1)])
        self.assertEqual(masks[0]["_bytes"], bytes((a != 0).to(torch.uint8).tolist()))
        self.assertEqual(masks[1]["_bytes"], bytes((b != 0).to(torch.uint8).tolist()))
        self.assertEqual(self.obs.late_allocations, 1)  # index 1 was not planned

    def test_checkpoint_flags_reentrant_and_non_reentrant(self):
        from torch.utils.checkpoint import checkpoint

        for reentrant in (True, False):
            with self.subTest(reentrant=reentrant):
                self.obs.begin_step()
                x = torch.ones(16, requires_grad=True)
                y = checkpoint(self.drop, x, use_reentrant=reentrant)
                z = self.drop(y)  # outside the checkpoint
                z.sum().backward()
                got = [(m["pass"], m["index"], m["checkpointed"]) for m in self.obs.collect(False)]
                self.assertEqual(got, [("forward", 0, True), ("forward", 1, False), ("recompute", 0, True)])

    def test_non_reentrant_without_grad_owes_nothing(self):
        from torch.utils.checkpoint import checkpoint

        with torch.no_grad():
            checkpoint(self.drop, torch.ones(16), use_reentrant=False)
        self.assertEqual([m["checkpointed"] for m in self.obs.collect(False)], [False])

    def test_megatron_checkpoint_function_by_name_and_file(self):
        # megatron-core's tensor_parallel/random.py: CheckpointFunction.forward checkpoints; its
        # checkpoint() calling the function directly (PR #3919, graph warmup/capture) does not
        src = ("class CheckpointFunction:\n"
               "    @staticmethod\n"
               "    def forward(ctx, run_function, *args):\n"
               "        return run_function(*args)\n"
               "def checkpoint(function, distribute_saved_activations, *args):\n"
               "    return function(*args)\n")
        mg = _compiled(src, "/site-packages/megatron/core/tensor_parallel/random.py")
        other = _compiled(src, "/elsewhere/random.py")
        x = torch.ones(16)
        mg["CheckpointFunction"].forward(None, self.drop, x)
        mg["checkpoint"](self.drop, False, x)
        other["CheckpointFunction"].forward(None, self.drop, x)
        self.assertEqual([m["checkpointed"] for m in self.obs.collect(False)], [True, False, False])


class FakeGraph:
    """Stands for torch.cuda.CUDAGraph: the observer wraps its class attributes."""
    calls: list = []

    def capture_end(self):
        if getattr(self, "fail", False):
            raise RuntimeError("capture failed")
        FakeGraph.calls.append(("end", id(self)))

    def replay(self):
        FakeGraph.calls.append(("replay", id(self)))


class GraphObserverTest(unittest.TestCase):
    go: GraphObserver

    @classmethod
    def setUpClass(cls):
        cls.go = GraphObserver()
        cls.go.install(FakeGraph)
        GraphObserver().install(FakeGraph)  # a second observer does not wrap again

    def test_counts_by_label_and_calls_the_originals(self):
        go = self.go
        go.resolvers = []
        go.begin_run()
        FakeGraph.calls = []
        a, b = FakeGraph(), FakeGraph()
        a.capture_end()  # no resolver, no label: "?"
        go.label = "iteration"
        b.capture_end()
        go.label = ""
        self.assertEqual(go.captures, {"?": 1, "iteration": 1})
        b.replay()
        b.replay()
        a.replay()
        self.assertEqual(go.take_replays(), {"iteration": 2, "?": 1})
        self.assertEqual(go.take_replays(), {})
        self.assertEqual(FakeGraph.calls, [("end", id(a)), ("end", id(b)), ("replay", id(b)), ("replay", id(b)),
                                           ("replay", id(a))])  # each original called exactly once
        go.end_run()

    def test_failed_capture_and_other_runs_do_not_count(self):
        go = self.go
        go.resolvers = [lambda g: "linear1"]
        go.begin_run()
        old = FakeGraph()
        old.capture_end()
        go.end_run()
        old.replay()  # no run in progress
        go.begin_run()  # a new case: the graph of the last one is unknown
        old.replay()
        bad = FakeGraph()
        setattr(bad, "fail", True)  # FakeGraph.capture_end reads it
        with self.assertRaises(RuntimeError):
            bad.capture_end()
        self.assertEqual((go.captures, go.take_replays()), ({}, {}))
        g = FakeGraph()
        g.capture_end()
        g.replay()
        self.assertEqual((go.captures, go.take_replays()), ({"linear1": 1}, {"linear1": 1}))
        go.end_run()

    def test_make_graphed_callables_pairs_backward_graphs_with_their_callables(self):
        # the loop structure of torch 2.11's make_graphed_callables (torch/cuda/graphs.py): forward
        # graphs in callable order, backward graphs in reverse order
        src = ("def make_graphed_callables(callables, fwd_graphs, bwd_graphs):\n"
               "    for func, fwd_graph in zip(callables, fwd_graphs):\n"
               "        func()\n"
               "        fwd_graph.capture_end()\n"
               "    for bwd_graph in reversed(bwd_graphs):\n"
               "        bwd_graph.capture_end()\n")
        mgc = _compiled(src, "/site-packages/torch/cuda/graphs.py")["make_graphed_callables"]

        def fn(name):
            f = lambda: None  # noqa: E731
            setattr(f, "recap_path", name)
            return f

        go = self.go
        go.resolvers = [mgc_label]
        go.begin_run()
        fwd = [FakeGraph(), FakeGraph(), FakeGraph()]
        bwd = [FakeGraph(), FakeGraph(), FakeGraph()]
        mgc((fn("block0"), fn("linear1"), fn("block2")), fwd, bwd)
        self.assertEqual(go.captures, {"block0": 2, "linear1": 2, "block2": 2})
        bwd[0].replay()
        fwd[2].replay()
        self.assertEqual(go.take_replays(), {"block0": 1, "block2": 1})
        outside = FakeGraph()
        outside.capture_end()  # not inside make_graphed_callables: no label
        self.assertEqual(go.captures["?"], 1)
        go.end_run()


if __name__ == "__main__":
    unittest.main()
