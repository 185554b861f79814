"""End-to-end tests of the torch SUT through a worker subprocess (skipped without torch).

RECAP_DRIVER_DEVICE selects the worker's device (default cpu; cuda on a GPU machine).
"""

from __future__ import annotations

import copy
import math
import os
import struct
import sys
import unittest
from typing import Any, Dict

from tests.helpers import HAVE_TORCH, Worker, make_case, random_frames

if HAVE_TORCH:
    import torch

DEVICE = os.environ.get("RECAP_DRIVER_DEVICE", "cpu")

BASE = make_case("driver-e2e", [
    {"kind": "block", "heads": 2, "ffn_hidden": 16, "dropout": 0.1, "checkpoint": "full"},
    {"kind": "linear", "dropout": 0.0},
], microbatch_order=[1, 1, -1, -1])

ALL_KINDS = dict(BASE, name="all-kinds", hidden=8, tokens=5, microbatches=2, microbatch_order=[1, -1, 1, -1],
                 layers=[
                     {"kind": "layernorm"},
                     {"kind": "attention", "heads": 2, "dropout": 0.2, "checkpoint": "selective",
                      "checkpoint_modules": ["attn_core"]},
                     {"kind": "rmsnorm", "checkpoint": "full"},
                     {"kind": "mlp", "ffn_hidden": 12, "dropout": 0.1},
                     {"kind": "gelu"},
                     {"kind": "swiglu", "ffn_hidden": 12, "checkpoint": "full"},
                     {"kind": "dropout", "dropout": 0.3, "checkpoint": "full"},
                     {"kind": "block", "heads": 4, "dropout": 0.1, "checkpoint": "selective",
                      "checkpoint_modules": ["mlp", "norm", "attn_core"]},
                     {"kind": "linear"},
                 ])


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def without_checkpoint(case: dict) -> dict:
    c = copy.deepcopy(case)
    for l in c["layers"]:
        l["checkpoint"] = "none"
        l.pop("checkpoint_modules", None)
    return c


def tensor_of(frame):
    return torch.frombuffer(bytearray(frame.data), dtype=torch.float32).reshape(frame.shape).clone()


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class TorchDriverTest(unittest.TestCase):
    w: Worker
    hello: Dict[str, Any]
    next_id: int

    @classmethod
    def setUpClass(cls):
        cls.w = Worker(device=DEVICE)
        h, _ = cls.w.request({"op": "hello", "protocol": "recap.worker/1"})
        assert h["op"] == "hello", h
        cls.hello = h
        cls.next_id = 1

    @classmethod
    def tearDownClass(cls):
        cls.w.send({"op": "shutdown"})
        rc = cls.w.close()
        assert rc == 0, (rc, cls.w.stderr_text[-2000:])

    def run_case(self, case, frames=None, **opts):
        type(self).next_id += 1
        rid = self.next_id
        h, fr = self.w.request(dict({"op": "run", "id": rid, "case": case}, **opts),
                               frames if frames is not None else random_frames(case))
        self.assertEqual(h["op"], "observation", h)
        self.assertEqual(h["id"], rid)
        return h, fr

    def assert_ok(self, h):
        self.assertEqual(h["status"], "ok", h.get("reason"))

    # ---- tests ----

    def test_hello(self):
        h = self.hello
        self.assertEqual(h["protocol"], "recap.worker/1")
        self.assertEqual(h["version"], torch.__version__)
        caps = h["capabilities"]
        self.assertEqual(sorted(caps["kinds"]), sorted(["linear", "layernorm", "rmsnorm", "gelu", "swiglu", "dropout",
                                                        "attention", "mlp", "block"]))
        self.assertIn("eager", caps["executor"])
        self.assertEqual(caps["shared_pool"], [True, False])
        self.assertEqual(caps["graphs"], DEVICE == "cuda")
        if DEVICE == "cpu":
            self.assertEqual(h["device"], "cpu")
        # --gpus (issue 22): what the worker saw of its GPU; none on the CPU
        vd = h["visible_device"]
        self.assertEqual(vd["cuda_visible_devices"], os.environ.get("CUDA_VISIBLE_DEVICES"))
        if DEVICE == "cpu":
            self.assertEqual((vd["uuid"], vd["pci_bus_id"]), (None, None))
        else:
            self.assertRegex(vd["uuid"], r"^GPU-[0-9a-f]{8}-")

    def test_checkpoint_bitwise_equal_and_recompute_masks(self):
        frames = random_frames(BASE, seed=11)
        ref_h, ref_f = self.run_case(without_checkpoint(BASE), frames)
        self.assert_ok(ref_h)
        n_params = len(ref_h["param_names"])
        self.assertEqual(ref_h["param_names"][:3], ["block0.ln1.weight", "block0.ln1.bias", "block0.attn.qkv.weight"])
        self.assertEqual(ref_h["param_names"][-2:], ["linear1.weight", "linear1.bias"])
        steps = BASE["warmup"] + BASE["replays"]
        M = BASE["microbatches"]
        self.assertEqual(len(ref_f), steps * (M + 2) * n_params)
        variants = {
            "full reentrant": BASE,
            "full non-reentrant": dict(BASE, checkpoint_style="non-reentrant"),
            "selective reentrant": dict(BASE, layers=[dict(BASE["layers"][0], checkpoint="selective",
                                                           checkpoint_modules=["attn_core", "mlp", "norm"]),
                                                      BASE["layers"][1]]),
            "selective non-reentrant": dict(BASE, checkpoint_style="non-reentrant",
                                            layers=[dict(BASE["layers"][0], checkpoint="selective",
                                                         checkpoint_modules=["mlp", "attn_core"]),
                                                    BASE["layers"][1]]),
        }
        for what, case in variants.items():
            with self.subTest(what):
                h, f = self.run_case(case, frames)
                self.assert_ok(h)
                self.assertEqual(set(f), set(ref_f))
                for name in ref_f:  # every gradient and parameter frame, bit for bit
                    self.assertEqual(f[name].data, ref_f[name].data, f"{what}: frame '{name}' differs")
                for s, rs in zip(h["steps"], ref_h["steps"]):
                    self.assertEqual(s["phase"], "eager")
                    self.assertEqual(s["losses"], rs["losses"])
                    self.assertTrue(all(math.isfinite(x) for x in s["losses"]))
                    fwd = {(m["layer"], m["op"], m["microbatch"]): m["digest"] for m in s["masks"] if m["pass"] == "forward"}
                    rec = {(m["layer"], m["op"], m["microbatch"]): m["digest"] for m in s["masks"] if m["pass"] == "recompute"}
                    ref_fwd = {(m["layer"], m["op"], m["microbatch"]): m["digest"] for m in rs["masks"]}
                    self.assertEqual(fwd, ref_fwd)  # the same draws as without checkpoint
                    self.assertTrue(rec, "no recompute draw observed")
                    for m in s["masks"]:  # one draw per site and microbatch: index 0
                        self.assertEqual((m["index"], m["draws"]), (0, 1))
                        key = (m["layer"], m["op"], m["microbatch"])
                        self.assertEqual(m["checkpointed"], m["pass"] == "recompute" or key in rec)
                    for k, d in rec.items():
                        self.assertEqual(d, fwd[k], f"{what}: recomputed mask {k} differs from its forward mask")
                    if what.startswith("full"):  # every draw of block0 is recomputed
                        self.assertEqual(set(rec), set(fwd))
                    if what == "selective non-reentrant":  # mlp and attn_core, not drop1
                        self.assertEqual({k[0] for k in rec}, {"block0.attn.core", "block0.mlp.dropout"})
                # no recompute without checkpoint
                self.assertFalse([m for s in ref_h["steps"] for m in s["masks"] if m["pass"] == "recompute"])

    def check_against_fp64(self, case, seed):
        from tests.reference64 import Ref

        frames = random_frames(case, seed=seed)
        h, f = self.run_case(case, frames, mask_frames=True)
        self.assert_ok(h)
        names = h["param_names"]
        by_name = {fr.name: fr for fr in frames}
        params = {n: tensor_of(by_name[f"param {n}"]) for n in names}
        M = case["microbatches"]
        order = case.get("microbatch_order") or [1, -1] * M
        lr = f32(case["lr"])
        for step in range(2):
            inputs = [tensor_of(by_name[f"input {step} {m}"]) for m in range(M)]
            targets = [tensor_of(by_name[f"target {step} {m}"]) for m in range(M)]

            def masks(layer, op, mb, step=step):
                fr = f[f"mask {step} {mb} forward {layer} {op} 0"]
                return torch.tensor(list(fr.data), dtype=torch.uint8)

            ref = Ref(case, params)
            losses, grads, after = ref.step(inputs, targets, order, lr, masks)
            for m in range(M):
                got = h["steps"][step]["losses"][m]
                self.assertLessEqual(abs(got - losses[m]), 1e-5 * abs(losses[m]) + 1e-12, f"loss {step} {m}")
                for i, n in enumerate(names):
                    g = tensor_of(f[f"grad {step} {m} {i}"]).double()
                    r = grads[m][n]
                    err = (g - r).abs().max().item()
                    scale = r.abs().max().item()
                    self.assertLessEqual(err, 1e-5 * scale + 1e-9,
                                         f"grad {step} {m} {i} ({n}): max abs error {err:g}, max abs {scale:g}")
            for i, n in enumerate(names):
                p = tensor_of(f[f"param {step} {i}"]).double()
                r = after[n]
                err = (p - r).abs().max().item()
                self.assertLessEqual(err, 1e-5 * r.abs().max().item() + 1e-9, f"param {step} {i} ({n})")
            # the next step starts from the worker's parameters (so errors do not compound)
            params = {n: tensor_of(f[f"param {step} {i}"]) for i, n in enumerate(names)}

    def test_fp64_reference_block_linear(self):
        self.check_against_fp64(BASE, seed=5)

    def test_fp64_reference_all_kinds(self):
        self.check_against_fp64(ALL_KINDS, seed=6)

    def test_determinism_check(self):
        h, f = self.run_case(ALL_KINDS, determinism_check=True)
        self.assert_ok(h)
        self.assertEqual(len(h["steps"]), 3)

    def test_bf16(self):
        case = dict(BASE, dtype="bf16")
        h, f = self.run_case(case)
        self.assert_ok(h)
        for s in h["steps"]:
            self.assertTrue(all(math.isfinite(x) for x in s["losses"]))
            fwd = {(m["layer"], m["microbatch"]): m["digest"] for m in s["masks"] if m["pass"] == "forward"}
            for m in s["masks"]:
                if m["pass"] == "recompute":
                    self.assertEqual(m["digest"], fwd[(m["layer"], m["microbatch"])])

    @unittest.skipUnless(DEVICE == "cpu", "CPU worker only")
    def test_graphed_executors_skip_on_cpu(self):
        for ex in ("per-layer", "full-iteration"):
            with self.subTest(ex):
                h, f = self.run_case(dict(BASE, executor=ex, warmup_backward="grad-of-inputs"))
                self.assertEqual(h["status"], "skipped")
                self.assertIn(f"executor {ex}: needs CUDA graphs", h["reason"])
                self.assertEqual(f, {})
                self.assertEqual(h["steps"], [])

    def test_skipped_dimensions(self):
        cases = {
            "checkpoint_style without-output": dict(BASE, checkpoint_style="without-output"),
            "policy skip": dict(BASE, policy="skip"),
            "policy graph-safe": dict(BASE, policy="graph-safe"),
            "generator host": dict(BASE, generator="host"),
            "faults static-input-stale": dict(BASE, faults=["static-input-stale"]),  # recap's runtime's only
        }
        for want, case in cases.items():
            with self.subTest(want):
                h, _ = self.run_case(case)
                self.assertEqual(h["status"], "skipped")
                self.assertTrue(h["reason"].startswith(want), h["reason"])
                self.assertNotIn("\n", h["reason"])
        # a policy has no effect without checkpoints (recap ignores it too): it runs
        h, _ = self.run_case(dict(without_checkpoint(BASE), policy="graph-safe"))
        self.assert_ok(h)

    def test_corpus_cases_give_observations(self):
        """Every case of recap's corpus is read and answered with ok, failed or skipped."""
        import glob
        import json

        root = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "corpus")
        files = sorted(glob.glob(os.path.join(root, "*.json")))
        if not files:
            self.skipTest("no corpus next to drivers/")
        seen = {}
        for path in files:
            with open(path) as f:
                case = json.load(f)
            with self.subTest(os.path.basename(path)):
                h, _ = self.run_case(case)
                self.assertIn(h["status"], ("ok", "failed", "skipped"))
                if h["status"] == "skipped":
                    self.assertTrue(h["reason"])
                seen[os.path.basename(path)] = (h["status"], h["reason"][:100])
        sys.stderr.write("\n" + "\n".join(f"  {k}: {v[0]} {v[1]}" for k, v in seen.items()) + "\n")

    def test_every_draw_is_an_entry_with_its_checkpoint_flag(self):
        """A dropout inside a checkpoint: one forward entry (checkpointed) and one recompute entry,
        index 0 each; a dropout outside any checkpoint: a forward entry, not checkpointed."""
        for style in ("reentrant", "non-reentrant"):
            case = dict(BASE, checkpoint_style=style, microbatches=1, microbatch_order=[1, -1], layers=[
                {"kind": "dropout", "dropout": 0.3, "checkpoint": "full"},
                {"kind": "linear"},
                {"kind": "dropout", "dropout": 0.3},
            ])
            with self.subTest(style):
                h, f = self.run_case(case, mask_frames=True)
                self.assert_ok(h)
                self.assertEqual(h["graphs"], {"captures": {}})
                for s in h["steps"]:
                    self.assertEqual(s["replays"], {})
                    got = [(m["layer"], m["pass"], m["index"], m["checkpointed"]) for m in s["masks"]]
                    self.assertEqual(got, [("dropout0", "forward", 0, True), ("dropout2", "forward", 0, False),
                                           ("dropout0", "recompute", 0, True)])
                    by = {(m["layer"], m["pass"]): m["digest"] for m in s["masks"]}
                    self.assertEqual(by[("dropout0", "recompute")], by[("dropout0", "forward")])
                    for m in s["masks"]:
                        fr = f[f"mask {s['step']} 0 {m['pass']} {m['layer']} dropout {m['index']}"]
                        self.assertEqual(fr.shape, (m["numel"],))

    def test_memory_and_timings_present(self):
        h, _ = self.run_case(BASE)
        self.assert_ok(h)
        self.assertEqual(set(h["memory"]), {"capture_peak_bytes", "replay_peak_bytes", "graph_pool_bytes",
                                            "activations_in_graphs_bytes", "activations_eager_bytes"})
        self.assertGreater(h["timings"]["run_ms"], 0)
        self.assertTrue(all(s["ms"] > 0 for s in h["steps"]))
        # the graph pools per step (a pool growing across replays leaks): none on the CPU
        pools = [s["graph_pool_bytes"] for s in h["steps"]] + [s["graph_pool_used_bytes"] for s in h["steps"]]
        self.assertTrue(all(isinstance(b, int) and b >= 0 for b in pools), pools)
        if DEVICE == "cpu":
            self.assertEqual(pools, [0] * len(pools))


class DigestTest(unittest.TestCase):
    def test_digest_definition(self):
        from recap_drivers.core.observe import digest as observe

        # 32 kept elements: one word 0xffffffff -> bytes ff ff ff ff
        self.assertEqual(observe.mask_digest(bytes([1] * 32)), "%016x" % observe.fnv1a64(b"\xff\xff\xff\xff"))
        # element 0 and element 33 kept of 34: words 0x00000001, 0x00000002
        kept = bytes([1] + [0] * 32 + [1])
        self.assertEqual(observe.pack_mask_bits(kept), b"\x01\x00\x00\x00\x02\x00\x00\x00")
        # recap's offset basis (models/layers.cpp, executor_report.cpp): 1469598103934665603, not the
        # published FNV-1a 64 basis 14695981039346656037; the prime is the published one
        self.assertEqual(observe.fnv1a64(b""), 1469598103934665603)
        self.assertEqual(observe.fnv1a64(b"a"), ((1469598103934665603 ^ 0x61) * 1099511628211) % 2**64)
        if HAVE_TORCH:
            import random

            rnd = random.Random(1)
            for n in (1, 7, 8, 31, 32, 33, 100, 1000):
                kept = bytes(rnd.randint(0, 1) for _ in range(n))
                t = torch.tensor(list(kept), dtype=torch.uint8)
                self.assertEqual(observe.pack_bits_torch(t), observe.pack_mask_bits(kept), n)


@unittest.skipUnless(HAVE_TORCH, "torch is not importable")
class VisibleDeviceTest(unittest.TestCase):
    """recap --gpus (issue 22) pins a worker with CUDA_VISIBLE_DEVICES: its hello says the value it
    saw, so the report records what the worker observed, not what recap asked for."""

    def test_hello_reports_the_cuda_visible_devices_it_saw(self):
        w = Worker(device="cpu", env_extra={"CUDA_VISIBLE_DEVICES": "3"})
        try:
            h, _ = w.request({"op": "hello", "protocol": "recap.worker/1"})
        finally:
            w.send({"op": "shutdown"})
            w.close()
        self.assertEqual(h["visible_device"], {"cuda_visible_devices": "3", "uuid": None, "pci_bus_id": None})


if __name__ == "__main__":
    unittest.main()
