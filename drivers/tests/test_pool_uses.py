"""PoolUses: the graph-pool uses Megatron leaves open are counted and given back (no CUDA needed:
a fake torch._C with torch's use-count rule)."""

from __future__ import annotations

import unittest

from recap_drivers.frameworks.megatron.pool_uses import PoolUses


class FakeC:
    """torch's rule: begin adds a use, release takes one away and may not go below zero."""

    def __init__(self):
        self.uses = {}

    def _cuda_beginAllocateCurrentThreadToPool(self, device, pool):
        self.uses[(device, pool)] = self.uses.get((device, pool), 0) + 1

    def _cuda_endAllocateToPool(self, device, pool):
        pass

    def _cuda_releasePool(self, device, pool):
        n = self.uses[(device, pool)] - 1
        assert n >= 0, "released below zero"
        self.uses[(device, pool)] = n


def megatron_alloc(c, pool):  # alloc_tensor_from_graph_mempool: begin, end, no release
    c._cuda_beginAllocateCurrentThreadToPool(0, pool)
    c._cuda_endAllocateToPool(0, pool)


def torch_use_mem_pool(c, pool):  # torch.cuda.use_mem_pool: begin, end, release
    c._cuda_beginAllocateCurrentThreadToPool(0, pool)
    c._cuda_endAllocateToPool(0, pool)
    c._cuda_releasePool(0, pool)


class PoolUsesTest(unittest.TestCase):
    def test_megatron_allocations_are_given_back_and_balanced_ones_untouched(self):
        c = FakeC()
        ledger = PoolUses(c)
        for _ in range(3):
            megatron_alloc(c, (1, 0))
        torch_use_mem_pool(c, (1, 0))
        torch_use_mem_pool(c, (2, 0))
        self.assertEqual(c.uses, {(0, (1, 0)): 3, (0, (2, 0)): 0})
        self.assertEqual(ledger.give_back(), 3)
        self.assertEqual(c.uses, {(0, (1, 0)): 0, (0, (2, 0)): 0})
        self.assertEqual(ledger.give_back(), 0)  # nothing is released twice

    def test_uninstall_restores_torch(self):
        c = FakeC()
        begin = c._cuda_beginAllocateCurrentThreadToPool
        ledger = PoolUses(c)
        self.assertNotEqual(c._cuda_beginAllocateCurrentThreadToPool, begin)
        ledger.uninstall()
        self.assertEqual(c._cuda_beginAllocateCurrentThreadToPool, begin)

    def test_without_the_entry_points_nothing_is_wrapped(self):
        class Bare:
            pass

        ledger = PoolUses(Bare())
        self.assertFalse(ledger.installed)
        self.assertEqual(ledger.give_back(), 0)


if __name__ == "__main__":
    unittest.main()
