"""Framework mutants (recap_drivers/mutants/) on the CPU: each CPU-capable torch mutant installs
and changes what torch computes; with RECAP_FRAMEWORK_MUTANT unset nothing is patched; an unknown
name stops the worker with exit 2 and one line. Patches are process-wide, so every probe runs in a
subprocess of its own.

    cd drivers && /tmp/tv2/bin/python -m unittest tests.test_mutants
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import unittest

from recap_drivers import mutants
from recap_drivers.core import protocol
from tests.helpers import DRIVERS, HAVE_TORCH

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
    x2 = x.detach().requires_grad_(True)
    y2 = r2(x2)
    y2.sum().backward()
    key = "reentrant" if reentrant else "non-reentrant"
    out[key] = {
        "calls": len(r.masks),
        "recompute_mask_equal": len(r.masks) >= 2 and r.masks[0] == r.masks[1],
        "forward_mask_as_plain": r.masks[0] == r2.masks[0],
        "grad_equal": g_ckpt is not None and torch.equal(g_ckpt, r2.lin.weight.grad),
        "xgrad_equal": x.grad is not None and torch.equal(x.grad, x2.grad),
    }
print(json.dumps(out))
"""

# Runs the worker's own start (python -m recap_drivers) on a hello and a shutdown, then says what is
# patched: the hook is where the mutant is read, so this is what a worker has before its first case.
STATE = r"""
import io, json, os, sys
from recap_drivers.core import protocol
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


class AgainstUnmutated(unittest.TestCase):
    """Mutants judged against the same probe run without one (`clean`, once per class)."""

    clean: dict

    @staticmethod
    def run_probe(name: str) -> dict:  # the probe with mutant `name` ("" none)
        raise NotImplementedError

    @classmethod
    def setUpClass(cls):
        cls.clean = cls.run_probe("")


# the bug classes docs/recompute-and-rng.md numbers in its tables (section 3): "| N | ..." rows
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "recompute-and-rng.md")) as _f:
    DOC_CLASSES = {int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", _f.read(), re.M)}


class Table(unittest.TestCase):
    def test_at_least_ten_named_mutants_per_sut_with_classes(self):
        self.assertGreaterEqual(len(mutants.for_sut("torch")), 10)
        self.assertGreaterEqual(len(mutants.for_sut("megatron")), 10)
        self.assertEqual(len(mutants.BY_NAME), len(mutants.MUTANTS), "names are unique")
        for m in mutants.MUTANTS:
            self.assertTrue(m.suts and set(m.suts) <= {"torch", "megatron"}, m.name)
            self.assertIn(m.bug_class, DOC_CLASSES, m.name)  # docs/recompute-and-rng.md section 3
            self.assertIn(m.needs, ("", "cuda", "graphs", "ranks"))
            self.assertNotIn("\n", m.description)

    def test_graph_mutants_apply_to_both_suts(self):
        for name in ("graph-replay-skipped", "graph-replay-rng-frozen"):
            for sut in ("torch", "megatron"):
                m, err = mutants.requested(sut, {mutants.ENV: name})
                assert m is not None, err
                self.assertEqual((m.name, err), (name, ""))
        m, err = mutants.requested("megatron", {mutants.ENV: "ckpt-no-rng-preserve"})
        self.assertIsNone(m)
        self.assertIn("not a mutant of megatron", err)
        ls = {e["name"] for e in mutants.listing("megatron", {"graphs": True}, "NVIDIA H200")}
        self.assertIn("graph-replay-skipped", ls)
        self.assertIn("mcore-grad-buffer-not-zeroed", ls)
        self.assertNotIn("ckpt-no-rng-preserve", ls)

    def test_requested(self):
        self.assertEqual(mutants.requested("torch", {}), (None, ""))
        m, err = mutants.requested("torch", {mutants.ENV: "ckpt-no-rng-preserve"})
        assert m is not None, err
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
        self.assertIn("rank group", ls["dist-all-reduce-skipped"]["not_exercised"])
        ls = {e["name"]: e for e in mutants.listing("torch", {"graphs": True}, "NVIDIA H200")}
        self.assertEqual([n for n, e in ls.items() if e["not_exercised"]],
                         ["dist-all-reduce-skipped", "dist-all-gather-reversed"])
        ls = {e["name"]: e for e in mutants.listing("torch", {"graphs": True, "tp": [2]}, "NVIDIA H200")}  # a rank group
        self.assertTrue(all(e["not_exercised"] == "" for e in ls.values()))

    def test_the_table_imports_no_framework(self):
        p = subprocess.run([sys.executable, "-c", "import sys; from recap_drivers import mutants; "
                            "print('torch' in sys.modules, 'megatron' in sys.modules)"],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=DRIVERS))
        self.assertEqual(p.stdout.strip(), "False False", p.stderr)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class CpuMutants(AgainstUnmutated):
    run_probe = staticmethod(probe)

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

    def test_input_grad_lost(self):
        r = probe("ckpt-input-grad-lost")
        self.assertTrue(r["reentrant"]["recompute_mask_equal"])
        self.assertTrue(r["reentrant"]["grad_equal"], "the weight gradient is kept")
        self.assertFalse(r["reentrant"]["xgrad_equal"], "the input gradient survived")
        self.assertTrue(r["non-reentrant"]["xgrad_equal"], "reentrant checkpoints only")
        self.assertTrue(self.clean["reentrant"]["xgrad_equal"] and self.clean["non-reentrant"]["xgrad_equal"])

    def test_every_cpu_capable_torch_mutant_is_tested(self):
        tested = {"ckpt-no-rng-preserve", "ckpt-recompute-fresh-generator", "ckpt-recompute-offset-shift",
                  "ckpt-param-grad-lost", "ckpt-input-grad-lost",
                  "dist-all-reduce-skipped", "dist-all-gather-reversed"}  # DistributedMutants
        self.assertEqual({m.name for m in mutants.for_sut("torch") if m.cpu}, tested)

    def test_gpu_mutants_install_on_a_cpu_torch(self):
        # their features are looked for at install: torch 2.11 has them (the GPU run fires them)
        for name in ("ckpt-cpu-rng-only", "graph-replay-skipped", "graph-replay-rng-frozen",
                     "graph-static-input-stale", "graph-warmup-mutates-params"):
            p = _run("import sys; from recap_drivers import mutants; mutants.install(mutants.BY_NAME[sys.argv[1]])", name)
            self.assertEqual(p.returncode, 0, f"{name}: {p.stderr[-800:]}")

# Two gloo ranks (processes) call all_reduce and all_gather_into_tensor, with a mutant installed or
# none; rank 0 prints what it got.
COLLECTIVES = r"""
import json, os, sys, tempfile
import torch, torch.distributed as dist, torch.multiprocessing as mp
from recap_drivers import mutants

def rank(r, name, path, q):
    if name:
        mutants.install(mutants.BY_NAME[name])
    dist.init_process_group("gloo", init_method="file://" + path, rank=r, world_size=2)
    x = torch.tensor([float(r + 1)])
    dist.all_reduce(x)
    g = torch.empty(2)
    dist.all_gather_into_tensor(g, torch.tensor([float(r)]))
    if r == 0:
        q.put({"all_reduce": x.tolist(), "all_gather": g.tolist()})
    dist.destroy_process_group()

if __name__ == "__main__":
    ctx = mp.get_context("fork")  # -c code cannot be pickled for spawn; CPU torch forks safely
    q = ctx.Queue()
    path = os.path.join(tempfile.mkdtemp(), "store")
    ps = [ctx.Process(target=rank, args=(r, sys.argv[1], path, q)) for r in range(2)]
    for p in ps:
        p.start()
    print(json.dumps(q.get(timeout=120)))
    for p in ps:
        p.join()
"""


def collectives(name: str) -> dict:
    p = subprocess.run([sys.executable, "-c", COLLECTIVES, name], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=DRIVERS))
    assert p.returncode == 0, p.stderr[-800:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class DistributedMutants(unittest.TestCase):
    def test_unmutated(self):
        self.assertEqual(collectives(""), {"all_reduce": [3.0], "all_gather": [0.0, 1.0]})

    def test_all_reduce_skipped(self):
        self.assertEqual(collectives("dist-all-reduce-skipped"), {"all_reduce": [1.0], "all_gather": [0.0, 1.0]})

    def test_all_gather_reversed(self):
        self.assertEqual(collectives("dist-all-gather-reversed"), {"all_reduce": [3.0], "all_gather": [1.0, 0.0]})


# A stand-in for megatron-core, on the CPU generator: the module paths and method names the megatron
# mutants patch (tensor_parallel.random's tracker and CheckpointFunction, DDP's zero_grad_buffer),
# each a few lines of recap's own, so a patch's effect on them can be checked without megatron-core.
# argv[1] names the mutant, argv[2] a method to leave out (the refusal test).
FAKE_MCORE = r"""
import contextlib, json, sys, types, torch
name, drop = sys.argv[1], sys.argv[2]

class CudaRNGStatesTracker:
    def __init__(self):
        self.states_ = {}
    def get_states(self):
        return dict(self.states_)
    def set_states(self, states):
        self.states_ = states
    def add(self, n, seed):
        keep = torch.get_rng_state(); torch.manual_seed(seed)
        self.states_[n] = torch.get_rng_state(); torch.set_rng_state(keep)
    @contextlib.contextmanager
    def fork(self, name="model-parallel-rng"):
        keep = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(keep)

TRACKER = CudaRNGStatesTracker()

class CheckpointFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run_function, distribute, *args):
        ctx.run_function = run_function
        ctx.saved = (torch.get_rng_state(), TRACKER.get_states())
        ctx.save_for_backward(*args)
        with torch.no_grad():
            return run_function(*args)
    @staticmethod
    def backward(ctx, *grads):
        keep = (torch.get_rng_state(), TRACKER.get_states())
        torch.set_rng_state(ctx.saved[0]); TRACKER.set_states(ctx.saved[1])
        ins = [t.detach().requires_grad_(t.requires_grad) for t in ctx.saved_tensors]
        with torch.enable_grad():
            out = ctx.run_function(*ins)
        torch.set_rng_state(keep[0]); TRACKER.set_states(keep[1])
        torch.autograd.backward(out, grads)
        return (None, None) + tuple(t.grad for t in ins)

class DistributedDataParallel:
    def __init__(self):
        self.zeroed = 0
        self.synced = 0
    def zero_grad_buffer(self):
        self.zeroed += 1
    def finish_grad_sync(self, force_all_reduce=False):
        self.synced += 1

SEEDS = {}
def model_parallel_cuda_manual_seed(seed, te_rng_tracker=False, inference_rng_tracker=False,
                                    use_cudagraphable_rng=False, tp_rank=None, ep_rank=None, etp_rank=None,
                                    force_reset_rng=False):
    if tp_rank is None:
        tp_rank = 1  # this stand-in's rank: parallel_state.get_tensor_model_parallel_rank()
    SEEDS["model-parallel-rng"] = seed + 2718 + tp_rank

if drop:
    for cls in (CudaRNGStatesTracker, DistributedDataParallel):
        if drop in cls.__dict__:
            delattr(cls, drop)
rnd = types.ModuleType("megatron.core.tensor_parallel.random")
rnd.CudaRNGStatesTracker, rnd.CheckpointFunction = CudaRNGStatesTracker, CheckpointFunction
rnd.get_cuda_rng_tracker = lambda: TRACKER
rnd.model_parallel_cuda_manual_seed = model_parallel_cuda_manual_seed
ddp = types.ModuleType("megatron.core.distributed.distributed_data_parallel")
ddp.DistributedDataParallel = DistributedDataParallel
mods = {"megatron": types.ModuleType("megatron"), "megatron.core": types.ModuleType("megatron.core"),
        "megatron.core.tensor_parallel": types.ModuleType("megatron.core.tensor_parallel"),
        "megatron.core.distributed": types.ModuleType("megatron.core.distributed"),
        "megatron.core.tensor_parallel.random": rnd,
        "megatron.core.distributed.distributed_data_parallel": ddp}
mods["megatron.core.tensor_parallel"].random = rnd
mods["megatron.core.tensor_parallel"].model_parallel_cuda_manual_seed = model_parallel_cuda_manual_seed
mods["megatron.core.distributed"].distributed_data_parallel = ddp
sys.modules.update(mods)

from recap_drivers import mutants
if name:
    try:
        mutants.install(mutants.BY_NAME[name])
    except RuntimeError as e:
        print(json.dumps({"refused": str(e)})); sys.exit(0)

torch.manual_seed(0)
TRACKER.add("model-parallel-rng", 123)
out = {}
# two forks in a row: their draws must differ (the named state advances)
with TRACKER.fork():
    a = torch.rand(8)
with TRACKER.fork():
    b = torch.rand(8)
out["forks_differ"] = not torch.equal(a, b)
out["get_states_is_live"] = TRACKER.get_states() is TRACKER.states_
# a checkpointed region drawing its dropout inside a tracker fork: the recompute's mask against the forward's
lin = torch.nn.Linear(8, 8)
masks = []
def region(x):
    with TRACKER.fork():
        m = torch.rand(4, 8) > 0.5
    masks.append(m)
    return lin(x) * m
x0 = torch.randn(4, 8, requires_grad=True)
h = x0 * 2  # the region's input is computed, so its gradient flows on to x0
y = CheckpointFunction.apply(region, False, h)
y.sum().backward()
out["recompute_mask_equal"] = len(masks) == 2 and torch.equal(masks[0], masks[1])
out["input_grad"] = x0.grad is not None
d = DistributedDataParallel(); d.zero_grad_buffer(); d.finish_grad_sync()
out["zeroed"] = d.zeroed
out["synced"] = d.synced
# the tracker seed of tensor-parallel rank 1, called as the driver calls it (the package's name)
sys.modules["megatron.core.tensor_parallel"].model_parallel_cuda_manual_seed(10, use_cudagraphable_rng=False)
out["tracker_seed"] = SEEDS["model-parallel-rng"]
print(json.dumps(out))
"""


def fake_mcore(name: str, drop: str = "") -> dict:
    p = _run(FAKE_MCORE, name, drop)
    if p.returncode != 0:
        raise AssertionError(f"fake megatron {name or '(none)'} failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class MegatronMutantsOnAStub(AgainstUnmutated):
    """The megatron mutants' patches on recap's stand-in classes with megatron-core's names."""

    run_probe = staticmethod(fake_mcore)

    def test_the_stub_is_right_without_a_mutant(self):
        self.assertEqual(self.clean, {"forks_differ": True, "get_states_is_live": False,
                                      "recompute_mask_equal": True, "input_grad": True, "zeroed": 1, "synced": 1,
                                      "tracker_seed": 10 + 2718 + 1})

    def changed(self, name: str) -> dict:
        r = fake_mcore(name)
        return {k: v for k, v in r.items() if v != self.clean[k]}

    def test_tracker_states_live(self):
        self.assertEqual(self.changed("mcore-tracker-states-live"),
                         {"get_states_is_live": True, "recompute_mask_equal": False})

    def test_recompute_default_generator(self):
        self.assertEqual(self.changed("mcore-recompute-default-generator"), {"recompute_mask_equal": False})

    def test_fork_not_advancing(self):
        self.assertEqual(self.changed("mcore-fork-not-advancing"), {"forks_differ": False})

    def test_input_grad_lost(self):
        self.assertEqual(self.changed("mcore-input-grad-lost"), {"input_grad": False})

    def test_grad_buffer_not_zeroed(self):
        self.assertEqual(self.changed("mcore-grad-buffer-not-zeroed"), {"zeroed": 0})

    def test_tp_seed_shared_seeds_rank_1_as_rank_0(self):
        self.assertEqual(self.changed("mcore-tp-seed-shared"), {"tracker_seed": 10 + 2718})

    def test_dp_grads_not_reduced_skips_the_sync(self):
        self.assertEqual(self.changed("mcore-dp-grads-not-reduced"), {"synced": 0})

    def test_param_grad_lost_keeps_masks_and_input_grads(self):
        self.assertEqual(self.changed("mcore-param-grad-lost"), {})  # weights only: the stub checks none

    def test_a_missing_target_refuses_with_one_line(self):
        for name, drop in (("mcore-tracker-states-live", "get_states"),
                           ("mcore-fork-not-advancing", "fork"),
                           ("mcore-recompute-default-generator", "fork"),
                           ("mcore-grad-buffer-not-zeroed", "zero_grad_buffer"),
                           ("mcore-dp-grads-not-reduced", "finish_grad_sync")):
            r = fake_mcore(name, drop)
            self.assertIn("refused", r, name)
            self.assertIn(drop, r["refused"])
            self.assertNotIn("\n", r["refused"])


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
