"""The megatron rank group's parameter layout against megatron-core's own tensor-parallel split,
on the CPU: megatron_tp_rank.py runs megatron-core's TransformerLayer (read from the wheels
scripts/bootstrap.sh downloads, never installed) over tp 2 and 4 gloo ranks, loaded and read back
through the driver's MegatronModel (tp 1, 2 and 4); every parameter and gradient the leader assembles must equal
recap's own block's (fp32, within 1e-5 relative L2), and a planted layout mistake must not."""

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


def run_group(root: str, world: int, planted: str = "") -> Dict[str, Any]:
    port = free_port()
    # TORCH_CUDA_ARCH_LIST: megatron-core 0.15.3 builds a small CUDA extension when imported
    # (inference/unified_memory.py), which needs an architecture where no GPU is visible
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([DRIVERS, root]), TORCH_CUDA_ARCH_LIST="9.0",
               PYTHONDONTWRITEBYTECODE="1", PYTHONWARNINGS="ignore")
    procs: List[subprocess.Popen] = [
        subprocess.Popen([sys.executable, RANK, str(r), str(world), str(port)] + ([planted] if planted else []),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for r in range(world)]
    outs = [p.communicate(timeout=600) for p in procs]
    for r, (p, (o, e)) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            raise AssertionError(f"rank {r} exited {p.returncode}: {e[-3000:]}")
    line = [l for l in outs[0][0].splitlines() if l.startswith("RESULT ")]
    if not line:
        raise AssertionError(f"rank 0 printed no result: {outs[0][1][-3000:]}")
    return json.loads(line[-1][7:])


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
        for root in self.extracted():
            for world in (1, 2, 4):  # 1: the one-rank driver's layout (qkv rows permuted only)
                with self.subTest(wheel=os.path.basename(root), tp=world):
                    r = run_group(root, world)
                    self.assertEqual(r["split"], 12 if world > 1 else 0)  # per block: qkv w/b, proj w, fc1 w/b, fc2 w
                    self.assertLess(abs(r["loss"] - r["ref_loss"]), 1e-5 * abs(r["ref_loss"]))
                    for what in ("params", "grads"):
                        bad = {n: e for n, e in r[what].items() if not e <= TOL}
                        self.assertEqual(bad, {}, f"{what} differing from recap's block's")
                    self.assertEqual(max(r["params"].values()), 0.0)  # loaded and read back: exact

    def test_a_wrong_qkv_layout_is_caught(self) -> None:
        roots = self.extracted()
        r = run_group(roots[-1], 2, "qkv-blocks")
        bad = sorted(n for n, e in r["grads"].items() if not e <= TOL)
        self.assertIn("block0.attn.qkv.weight", bad)
        self.assertGreater(abs(r["loss"] - r["ref_loss"]), 1e-4)


if __name__ == "__main__":
    unittest.main()
