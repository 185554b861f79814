"""Framework mutants (recap_drivers/mutants.py) on the CPU: each CPU-capable torch mutant installs
and changes what torch computes; with RECAP_FRAMEWORK_MUTANT unset nothing is patched; an unknown
name stops the worker with exit 2 and one line. Patches are process-wide, so every probe runs in a
subprocess of its own.

    cd drivers && /tmp/tv2/bin/python -m unittest tests.test_mutants
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVERS = os.path.dirname(HERE)
sys.path.insert(0, DRIVERS)

from recap_drivers import mutants  # noqa: E402
from recap_drivers import protocol  # noqa: E402

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

# What a checkpointed region computes, with and without a mutant: the masks of its forward and of
# its recompute (a dropout layer records each call's mask), and the weight's gradient through
# checkpoint against the same region run plainly.
PROBE = r"""
import json, sys, torch
import torch.nn.functional as F
from recap_drivers import mutants
name = sys.argv[1]
if name:
    mutants.install(mutants.BY_NAME[name])

class Region(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)
        self.masks = []
    def forward(self, x):
        y = F.dropout(self.lin(x), 0.5, training=True)
        self.masks.append((y != 0).flatten().tolist())
        return y

out = {}
for reentrant in (True, False):
    torch.manual_seed(3)
    r = Region()
    x = torch.randn(8, 16, requires_grad=True)
    # the whole recompute, so the region records its mask (early stop ends it at the last saved tensor)
    with torch.utils.checkpoint.set_checkpoint_early_stop(False):
        y = torch.utils.checkpoint.checkpoint(r, x, use_reentrant=reentrant, preserve_rng_state=True)
        y.sum().backward()
    g_ckpt = None if r.lin.weight.grad is None else r.lin.weight.grad.clone()
    # the same region without checkpoint, with the forward's mask: the gradient it should have
    torch.manual_seed(3)
    r2 = Region()
    r2.load_state_dict(r.state_dict())
    torch.manual_seed(3); torch.nn.Linear(16, 16); torch.randn(8, 16)  # the same draws as above
    y2 = r2(x.detach().requires_grad_(True))
    y2.sum().backward()
    key = "reentrant" if reentrant else "non-reentrant"
    out[key] = {
        "calls": len(r.masks),
        "recompute_mask_equal": len(r.masks) >= 2 and r.masks[0] == r.masks[1],
        "forward_mask_as_plain": r.masks[0] == r2.masks[0],
        "grad_equal": g_ckpt is not None and torch.equal(g_ckpt, r2.lin.weight.grad),
    }
print(json.dumps(out))
"""

# Runs the worker's own start (python -m recap_drivers) on a hello and a shutdown, then says what is
# patched: the hook is where the mutant is read, so this is what a worker has before its first case.
STATE = r"""
import io, json, os, sys
from recap_drivers import protocol
from recap_drivers.__main__ import main
msgs = protocol.encode_message({"op": "hello", "protocol": "recap.worker/1"}) + \
       protocol.encode_message({"op": "shutdown"})
sys.stdin = io.TextIOWrapper(io.BytesIO(msgs))
rc = main(["--sut", "torch", "--device", "cpu"])
import torch, torch.utils.checkpoint as cp, torch.cuda.graphs as graphs
state = {"rc": rc,
         "checkpoint": getattr(cp.checkpoint, "__module__", ""),
         "checkpoint_patched": hasattr(cp.checkpoint, "recap_mutant"),
         "set_device_states_patched": hasattr(cp.set_device_states, "recap_mutant"),
         "mgc_patched": hasattr(graphs.make_graphed_callables, "__wrapped__"),
         "replay": type(torch._C._CUDAGraph.replay).__name__}
sys.stderr.write("STATE " + json.dumps(state) + "\n")
"""


def _run(code: str, *args: str, mutant: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = DRIVERS + os.pathsep + env.get("PYTHONPATH", "")
    env.pop(mutants.ENV, None)
    if mutant:
        env[mutants.ENV] = mutant
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


def probe(name: str) -> dict:
    p = _run(PROBE, name)
    if p.returncode != 0:
        raise AssertionError(f"probe {name or '(none)'} failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


class Table(unittest.TestCase):
    def test_at_least_ten_named_mutants_with_classes(self):
        self.assertGreaterEqual(len(mutants.MUTANTS), 10)
        self.assertEqual(len(mutants.BY_NAME), len(mutants.MUTANTS), "names are unique")
        for m in mutants.MUTANTS:
            self.assertIn(m.sut, ("torch", "megatron"))
            self.assertTrue(1 <= m.bug_class <= 25, m.name)
            self.assertIn(m.needs, ("", "cuda", "graphs"))
            self.assertNotIn("\n", m.description)
        self.assertTrue(mutants.for_sut("torch") and mutants.for_sut("megatron"))

    def test_requested(self):
        self.assertEqual(mutants.requested("torch", {}), (None, ""))
        m, err = mutants.requested("torch", {mutants.ENV: "ckpt-no-rng-preserve"})
        self.assertEqual((m.name, err), ("ckpt-no-rng-preserve", ""))
        m, err = mutants.requested("torch", {mutants.ENV: "mcore-param-grad-lost"})  # megatron's, not torch's
        self.assertIsNone(m)
        self.assertIn("not a mutant of torch", err)

    def test_listing_says_what_a_cpu_worker_cannot_fire(self):
        caps = {"graphs": False}
        ls = {e["name"]: e for e in mutants.listing("torch", caps, "cpu")}
        self.assertEqual(ls["ckpt-no-rng-preserve"]["not_exercised"], "")
        self.assertIn("CUDA graphs", ls["graph-replay-skipped"]["not_exercised"])
        self.assertIn("CUDA device", ls["ckpt-cpu-rng-only"]["not_exercised"])
        ls = {e["name"]: e for e in mutants.listing("torch", {"graphs": True}, "NVIDIA H200")}
        self.assertTrue(all(e["not_exercised"] == "" for e in ls.values()))

    def test_the_table_imports_no_framework(self):
        p = subprocess.run([sys.executable, "-c", "import sys; from recap_drivers import mutants; "
                            "print('torch' in sys.modules, 'megatron' in sys.modules)"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=DRIVERS))
        self.assertEqual(p.stdout.strip(), "False False", p.stderr)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class CpuMutants(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.clean = probe("")

    def test_unmutated_checkpoint_recomputes_the_forward(self):
        for style in ("reentrant", "non-reentrant"):
            r = self.clean[style]
            self.assertEqual(r["calls"], 2, style)
            self.assertTrue(r["recompute_mask_equal"], style)
            self.assertTrue(r["forward_mask_as_plain"], style)
            self.assertTrue(r["grad_equal"], style)

    def _rng_mutant(self, name):
        r = probe(name)
        for style in ("reentrant", "non-reentrant"):
            self.assertEqual(r[style]["calls"], 2, style)
            self.assertFalse(r[style]["recompute_mask_equal"], f"{name} {style}: recompute mask unchanged")
            self.assertTrue(r[style]["forward_mask_as_plain"], f"{name} {style}: the forward must be untouched")
            self.assertFalse(r[style]["grad_equal"], f"{name} {style}: gradient unchanged")

    def test_no_rng_preserve(self):
        self._rng_mutant("ckpt-no-rng-preserve")

    def test_recompute_fresh_generator(self):
        self._rng_mutant("ckpt-recompute-fresh-generator")

    def test_recompute_offset_shift(self):
        self._rng_mutant("ckpt-recompute-offset-shift")

    def test_param_grad_lost(self):
        r = probe("ckpt-param-grad-lost")
        self.assertTrue(r["reentrant"]["recompute_mask_equal"])  # the masks are right...
        self.assertFalse(r["reentrant"]["grad_equal"], "the weight gradient survived")  # ...the gradient is lost
        self.assertTrue(r["non-reentrant"]["grad_equal"], "reentrant checkpoints only")

    def test_every_cpu_capable_torch_mutant_is_tested(self):
        tested = {"ckpt-no-rng-preserve", "ckpt-recompute-fresh-generator", "ckpt-recompute-offset-shift",
                  "ckpt-param-grad-lost"}
        self.assertEqual({m.name for m in mutants.for_sut("torch") if m.cpu}, tested)

    def test_gpu_mutants_install_on_a_cpu_torch(self):
        # their features are looked for at install: torch 2.11 has them (the GPU run fires them)
        for name in ("ckpt-cpu-rng-only", "graph-replay-skipped", "graph-replay-rng-frozen",
                     "graph-static-input-stale", "graph-warmup-mutates-params"):
            p = _run("import sys; from recap_drivers import mutants; mutants.install(mutants.BY_NAME[sys.argv[1]])", name)
            self.assertEqual(p.returncode, 0, f"{name}: {p.stderr[-800:]}")


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class WorkerStart(unittest.TestCase):
    def state(self, mutant: str) -> dict:
        p = _run(STATE, mutant=mutant)
        line = [l for l in p.stderr.splitlines() if l.startswith("STATE ")]
        self.assertTrue(line, p.stderr[-2000:])
        return json.loads(line[-1][6:])

    def test_nothing_patched_when_unset(self):
        s = self.state("")
        self.assertEqual(s["rc"], 0)
        self.assertEqual(s["checkpoint"], "torch.utils.checkpoint")
        self.assertFalse(s["checkpoint_patched"] or s["set_device_states_patched"] or s["mgc_patched"])
        self.assertEqual(s["replay"], "instancemethod")  # torch's own C++ method

    def test_a_named_mutant_is_installed_before_the_first_case(self):
        self.assertTrue(self.state("ckpt-no-rng-preserve")["checkpoint_patched"])
        self.assertTrue(self.state("graph-replay-skipped")["replay"] == "function")

    def test_unknown_mutant_exits_2_with_one_line(self):
        env = dict(os.environ, PYTHONPATH=DRIVERS)
        env[mutants.ENV] = "bogus"
        p = subprocess.run([sys.executable, "-m", "recap_drivers", "--sut", "torch", "--device", "cpu"],
                           input=protocol.encode_message({"op": "hello", "protocol": "recap.worker/1"}),
                           capture_output=True, env=env, timeout=120)
        self.assertEqual(p.returncode, 2)
        err = p.stderr.decode().strip().splitlines()
        self.assertEqual(len(err), 1, err)
        self.assertIn("RECAP_FRAMEWORK_MUTANT=bogus: not a mutant of torch", err[0])
        self.assertEqual(p.stdout, b"")


if __name__ == "__main__":
    unittest.main()
