"""reset_buffer_reuse: megatron-core 0.16-0.18 keep their graph-buffer reuse pool across
delete_cuda_graphs(); the driver empties it between cases (finding M10). No CUDA: a stand-in for
cuda_graphs.py with TensorReusePool's code of 0.18.2 (class attributes, data_ptr ownership)."""

from __future__ import annotations

import types
import unittest

import torch

from recap_drivers.frameworks.megatron.graphs import reset_buffer_reuse


class Meta:  # ArgMetadata's fields that TensorReusePool.get reads
    def __init__(self, t: torch.Tensor) -> None:
        self.shape, self.dtype, self.device = t.shape, t.dtype, t.device


class TensorReusePool:
    """megatron/core/transformer/cuda_graphs.py 0.18.2 :186-224, the pool's logic as it is."""

    tensor_strong_refs: list = []
    tensor_strong_refs_dataptrs: set = set()
    pool: list = []

    def insert(self, tensor: torch.Tensor) -> None:
        assert self.owns(tensor)
        self.pool.append(tensor)

    def owns(self, tensor: torch.Tensor) -> bool:
        return tensor.data_ptr() in self.tensor_strong_refs_dataptrs

    def get(self, meta: Meta) -> torch.Tensor:
        for i, buf in enumerate(self.pool):
            if buf.shape == meta.shape and buf.dtype == meta.dtype and buf.device == meta.device:
                return self.pool.pop(i)
        out = torch.zeros(meta.shape, dtype=meta.dtype, device=meta.device)
        self.tensor_strong_refs.append(out)
        self.tensor_strong_refs_dataptrs.add(out.data_ptr())
        return out


def fake_cuda_graphs() -> types.SimpleNamespace:
    TensorReusePool.tensor_strong_refs.clear()
    TensorReusePool.tensor_strong_refs_dataptrs.clear()
    TensorReusePool.pool.clear()
    record = type("_CudagraphGlobalRecord", (), {"tensor_reuse_pool": TensorReusePool()})
    return types.SimpleNamespace(_CudagraphGlobalRecord=record, fwd_buffer_reuse_ref_count=1,
                                 bwd_buffer_reuse_ref_count=2)


def graphs_ending_with_an_identity(pool: TensorReusePool, h: torch.Tensor) -> None:
    """What create_bwd_graph does when the last graphed layer returns its input (0.18.2 :1085-1157):
    its output-gradient buffer G comes from the pool and goes back after the capture; its input
    gradient, a view of G, is the previous graph's output-gradient buffer and goes back too."""
    g = pool.get(Meta(h))
    pool.insert(g)
    pool.insert(g.squeeze(1).unsqueeze(1))


class BufferReuseTest(unittest.TestCase):
    def test_the_pool_gives_one_memory_twice_after_an_identity_graph(self) -> None:
        """The mechanism of M10: the next case's static input and output gradient share memory."""
        cg = fake_cuda_graphs()
        pool = cg._CudagraphGlobalRecord.tensor_reuse_pool
        h = torch.zeros(4, 1, 8)
        graphs_ending_with_an_identity(pool, h)
        static_input, grad_output = pool.get(Meta(h)), pool.get(Meta(h))
        self.assertEqual(static_input.data_ptr(), grad_output.data_ptr())

    def test_reset_empties_the_class_level_pool_and_the_counters(self) -> None:
        cg = fake_cuda_graphs()
        pool = cg._CudagraphGlobalRecord.tensor_reuse_pool
        h = torch.zeros(4, 1, 8)
        graphs_ending_with_an_identity(pool, h)
        self.assertEqual(reset_buffer_reuse(cg), 1)  # the one buffer the pool had made
        self.assertEqual((TensorReusePool.pool, TensorReusePool.tensor_strong_refs), ([], []))
        self.assertEqual(TensorReusePool.tensor_strong_refs_dataptrs, set())
        self.assertEqual((cg.fwd_buffer_reuse_ref_count, cg.bwd_buffer_reuse_ref_count), (0, 0))
        # as in a new process: the next case's two requests get two buffers
        static_input, grad_output = pool.get(Meta(h)), pool.get(Meta(h))
        self.assertNotEqual(static_input.data_ptr(), grad_output.data_ptr())
        self.assertEqual(reset_buffer_reuse(cg), 2)
        self.assertEqual(reset_buffer_reuse(cg), 0)

    def test_versions_without_a_pool_are_left_alone(self) -> None:
        """0.15 and 0.19: no TensorReusePool (0.19 keeps the counters: reset to a new process's 0)."""
        cg = types.SimpleNamespace(_CudagraphGlobalRecord=type("R", (), {}), fwd_buffer_reuse_ref_count=3)
        self.assertEqual(reset_buffer_reuse(cg), 0)
        self.assertEqual(cg.fwd_buffer_reuse_ref_count, 0)
        self.assertEqual(reset_buffer_reuse(types.SimpleNamespace()), 0)


if __name__ == "__main__":
    unittest.main()
