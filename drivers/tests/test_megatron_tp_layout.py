"""The megatron rank group's side of megatron-core, on the CPU: megatron_tp_rank.py runs
megatron-core's own TransformerLayer (read from the wheels scripts/bootstrap.sh downloads, never
installed) over tp tensor-parallel ranks, pp pipeline stages and dp replicas of gloo processes, built, loaded and
read back through the driver's MegatronModel and stepped by megatron's own schedule, DDP and
finalize_model_grads. Every parameter and gradient the leader assembles must equal recap's own
model's (fp32, within 1e-5 relative L2), every stage's losses too, each stage's forwards and
backwards must run in core/schedules' 1F1B order, and planted mistakes (a wrong qkv layout, stages
holding each other's layers) must be caught."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest
import zipfile
from typing import Any, Dict, List

from tests.helpers import DRIVERS, HAVE_TORCH, megatron_wheels

RANK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "megatron_tp_rank.py")
TOL = 1e-5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_group(root: str, tp: int, pp: int, planted: str = "", dp: int = 1, vp: int = 1) -> Dict[str, Any]:
    port = free_port()
    world = tp * pp * dp
    # TORCH_CUDA_ARCH_LIST: megatron-core 0.15.3 builds a small CUDA extension when imported
    # (inference/unified_memory.py), which needs an architecture where no GPU is visible
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([DRIVERS, root]), TORCH_CUDA_ARCH_LIST="9.0",
               PYTHONDONTWRITEBYTECODE="1", PYTHONWARNINGS="ignore")
    procs: List[subprocess.Popen] = [
        subprocess.Popen([sys.executable, RANK, str(r), str(world), str(port), str(tp), str(pp), str(vp)] +
                         ([planted] if planted else []),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for r in range(world)]
    outs = [p.communicate(timeout=300) for p in procs]
    for r, (p, (o, e)) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            raise AssertionError(f"rank {r} exited {p.returncode}: {e[-3000:]}")
    line = [l for l in outs[0][0].splitlines() if l.startswith("RESULT ")]
    if not line:
        raise AssertionError(f"rank 0 printed no result: {outs[0][1][-3000:]}")
    return json.loads(line[-1][7:])


def close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL * abs(b)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class MegatronTensorParallelLayout(unittest.TestCase):
    tmp: tempfile.TemporaryDirectory

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.tmp.cleanup()

    def extracted(self) -> List[str]:
        roots = []
        for w in megatron_wheels(self):
            root = os.path.join(self.tmp.name, os.path.basename(w))
            if not os.path.isdir(root):
                with zipfile.ZipFile(w) as z:
                    z.extractall(root)
            roots.append(root)
        return roots

    def test_every_parameter_and_gradient_is_recaps(self) -> None:
        # (1, 1): the one-rank driver's layout (qkv rows permuted only)
        # (tp, pp, dp, vp); vp 2: megatron's interleaved schedule over the rank's two model chunks
        every = ((1, 1, 1, 1), (2, 1, 1, 1), (4, 1, 1, 1), (1, 2, 1, 1), (2, 2, 1, 1), (1, 1, 2, 1), (2, 1, 2, 1),
                 (1, 2, 1, 2), (2, 2, 1, 2))
        for root in self.extracted():
            # the older wheel: one shape of each kind (its layout code is the same), the newer every one
            shapes = every if "0.15." not in root else ((1, 1, 1, 1), (2, 1, 1, 1), (1, 2, 1, 1), (1, 1, 2, 1),
                                                        (1, 2, 1, 2))
            for tp, pp, dp, vp in shapes:
                with self.subTest(wheel=os.path.basename(root), tp=tp, pp=pp, dp=dp, vp=vp):
                    r = run_group(root, tp, pp, dp=dp, vp=vp)
                    self.assertEqual(r["split"], 12 if tp > 1 else 0)  # per block: qkv w/b, proj w, fc1 w/b, fc2 w
                    self.assertTrue(all(close(a, b) for a, b in zip(r["losses"], r["ref_losses"])),
                                    (r["losses"], r["ref_losses"]))
                    self.assertTrue(r["order_is_1f1b"])
                    for what in ("params", "grads"):
                        bad = {n: e for n, e in r[what].items() if not e <= TOL}
                        self.assertEqual(bad, {}, f"{what} differing from recap's model's")
                    self.assertEqual(max(r["params"].values()), 0.0)  # loaded and read back: exact

    def test_a_wrong_qkv_layout_is_caught(self) -> None:
        r = run_group(self.extracted()[-1], 2, 1, "qkv-blocks")
        bad = sorted(n for n, e in r["grads"].items() if not e <= TOL)
        self.assertIn("block0.attn.qkv.weight", bad)
        self.assertFalse(close(r["losses"][0], r["ref_losses"][0]))

    def test_chunks_holding_contiguous_layers_are_caught(self) -> None:
        # chunk k of stage s must hold virtual stage k * pp + s (get_transformer_layer_offset)
        r = run_group(self.extracted()[-1], 1, 2, "chunks-contiguous", vp=2)
        self.assertFalse(all(close(a, b) for a, b in zip(r["losses"], r["ref_losses"])))

    def test_megatron_core_p2p_defaults_with_two_stages_and_virtual_stages_are_wrong(self) -> None:
        # finding M12: ModelParallelConfig's defaults (batch_p2p_comm on, overlap_p2p_comm off) post
        # send_prev and send_next to the one peer of pp 2 in one batch; the peer matches them in the
        # other order. What the driver runs (Megatron-LM's settings) is right: the first test
        for root in self.extracted():
            with self.subTest(wheel=os.path.basename(root)):
                r = run_group(root, 1, 2, "mcore-p2p-defaults", vp=2)
                self.assertFalse(all(close(a, b) for a, b in zip(r["losses"], r["ref_losses"])))
                self.assertTrue(any(not e <= TOL for e in r["grads"].values()))

    def test_stages_holding_each_others_layers_are_caught(self) -> None:
        r = run_group(self.extracted()[-1], 1, 2, "stage-layers-swapped")
        self.assertFalse(all(close(a, b) for a, b in zip(r["losses"], r["ref_losses"])))
        self.assertTrue(any(not e <= TOL for e in r["grads"].values()))


if __name__ == "__main__":
    unittest.main()
