"""core/download.py: many tensors to the host in one copy per dtype, values and shapes unchanged."""

from __future__ import annotations

import unittest

import torch

from recap_drivers.core import download


class ToHostTest(unittest.TestCase):
    def test_values_shapes_and_dtypes_survive_in_order(self) -> None:
        g = torch.Generator().manual_seed(3)
        ts = [torch.randn(3, 4, generator=g), torch.randint(0, 2, (7,), generator=g, dtype=torch.uint8),
              torch.randn((), generator=g), torch.randn(2, 2, 2, generator=g).to(torch.bfloat16),
              torch.randn(0, 5, generator=g), torch.randn(5, generator=g)[::2]]  # a strided view
        out = download.to_host(ts)
        self.assertEqual(len(out), len(ts))
        for a, b in zip(ts, out):
            self.assertEqual((a.dtype, a.shape), (b.dtype, b.shape))
            self.assertTrue(torch.equal(a, b))  # bitwise for these dtypes (no NaN drawn)

    def test_each_copy_owns_its_storage(self) -> None:
        ts = [torch.zeros(4), torch.zeros(4)]
        out = download.to_host(ts)
        out[0].fill_(1.0)
        self.assertTrue(torch.equal(out[1], torch.zeros(4)))  # not a view of a shared buffer
        self.assertTrue(torch.equal(ts[0], torch.zeros(4)))   # nor of the source
        self.assertEqual(out[0].untyped_storage().nbytes(), 16)

    def test_nothing_to_copy(self) -> None:
        self.assertEqual(download.to_host([]), [])


if __name__ == "__main__":
    unittest.main()
