"""core/download.py: many tensors to the host, or to the device, in one copy per dtype, values and
shapes unchanged; and a run request's data moved so (records.RunData.on)."""

from __future__ import annotations

import unittest

import torch

from recap_drivers.core import download
from recap_drivers.core.records import RunData


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


class ToDeviceTest(unittest.TestCase):
    def test_values_shapes_and_dtypes_survive_in_order(self) -> None:
        g = torch.Generator().manual_seed(4)
        ts = [torch.randn(3, 4, generator=g), torch.randint(0, 2, (7,), generator=g, dtype=torch.uint8),
              torch.randn(2, 3, generator=g), torch.randn(0, 5, generator=g), torch.randn(5, generator=g)[::2]]
        out = download.to_device(ts, torch.device("cpu"))
        self.assertEqual(len(out), len(ts))
        for a, b in zip(ts, out):
            self.assertEqual((a.dtype, a.shape, b.device.type), (b.dtype, b.shape, "cpu"))
            self.assertTrue(torch.equal(a, b))
        # one buffer per dtype: the two fp32 tensors share one storage (one copy up)
        self.assertEqual(out[0].untyped_storage().data_ptr(), out[2].untyped_storage().data_ptr())
        self.assertNotEqual(out[0].untyped_storage().data_ptr(), out[1].untyped_storage().data_ptr())

    def test_run_data_keeps_its_keys_and_values(self) -> None:
        g = torch.Generator().manual_seed(5)
        d = RunData({"w": torch.randn(4, 3, generator=g), "b": torch.randn(4, generator=g)},
                    {(0, 0): torch.randn(2, 3, generator=g), (1, 0): torch.randn(2, 3, generator=g)},
                    {(0, 0): torch.randn(2, 3, generator=g), (1, 0): torch.randn(2, 3, generator=g)})
        m = d.on(torch.device("cpu"))
        self.assertEqual((list(d.params), list(d.inputs), list(d.targets)),
                         (list(m.params), list(m.inputs), list(m.targets)))
        for n in d.params:
            self.assertTrue(torch.equal(d.params[n], m.params[n]), n)
        for k in d.inputs:
            self.assertTrue(torch.equal(d.inputs[k], m.inputs[k]) and torch.equal(d.targets[k], m.targets[k]), k)


if __name__ == "__main__":
    unittest.main()
