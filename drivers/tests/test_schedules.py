"""core/schedules.py, the pipeline orders the torch driver runs and the oracle expects: megatron-core's
own example of its schedule table, the 1F1B orders by hand, every event once, and, where a
megatron-core wheel is at hand (RECAP_MEGATRON_WHEELS, default the repository's .whl/), its
get_schedule_table and get_pp_rank_microbatches read from the wheel and run against ours; and the
layers each (virtual) stage holds (frameworks/torch/pipeline.py stage_layers) against the wheel's
get_transformer_layer_offset."""

from __future__ import annotations

import ast
import os
import sys
import types
import unittest
import zipfile
from typing import Any, Dict, List, Optional, Tuple

from recap_drivers.core import schedules as S
from tests.helpers import HAVE_TORCH, megatron_wheels

FUNCTIONS = ("get_schedule_table", "get_pp_rank_microbatches")


def megatron_functions(wheel: str) -> Dict[str, Any]:
    """The two functions of the wheel's pipeline_parallel/schedules.py, compiled alone (the module
    imports CUDA-only parts of megatron-core): they read nothing but their arguments when a
    p2p_communicator is given."""
    with zipfile.ZipFile(wheel) as z:
        src = z.read("megatron/core/pipeline_parallel/schedules.py").decode()
    tree = ast.parse(src)
    body: List[ast.stmt] = []
    for n in tree.body:
        if isinstance(n, ast.FunctionDef) and n.name in FUNCTIONS:
            for a in n.args.args + n.args.kwonlyargs:
                a.annotation = None  # P2PCommunicator and friends are not imported
            body.append(n)
    ns: Dict[str, Any] = {"Optional": Optional}
    exec(compile(ast.Module(body=body, type_ignores=[]), wheel, "exec"), ns)  # noqa: S102 - megatron's own code
    return ns


def megatron_layer_offset(wheel: str) -> Any:
    """transformer_layer.py's get_transformer_layer_offset from the wheel, compiled alone: given the
    pipeline rank it reads only its config, and imports pipeline_parallel.utils.is_vp_first_stage
    (used only with account_for_embedding_in_pipeline_split), which a stand-in module provides."""
    with zipfile.ZipFile(wheel) as z:
        src = z.read("megatron/core/transformer/transformer_layer.py").decode()
    body: List[ast.stmt] = []
    for n in ast.parse(src).body:
        if isinstance(n, ast.FunctionDef) and n.name == "get_transformer_layer_offset":
            for a in n.args.args:
                a.annotation = None
            body.append(n)
    ns: Dict[str, Any] = {"Optional": Optional}
    exec(compile(ast.Module(body=body, type_ignores=[]), wheel, "exec"), ns)  # noqa: S102 - megatron's own code
    return ns["get_transformer_layer_offset"]


class _StandInModules:
    """megatron.core.pipeline_parallel.utils (is_vp_first_stage) in sys.modules while the offset runs."""

    NAMES = ("megatron", "megatron.core", "megatron.core.pipeline_parallel", "megatron.core.pipeline_parallel.utils")

    def __enter__(self) -> None:
        self.saved = {n: sys.modules.get(n) for n in self.NAMES}
        for n in self.NAMES:
            sys.modules[n] = types.ModuleType(n)
        sys.modules[self.NAMES[-1]].is_vp_first_stage = lambda vp_stage, vp_size: not vp_stage  # type: ignore[attr-defined]

    def __exit__(self, *exc: Any) -> None:
        for n, m in self.saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


class _Group:
    def __init__(self, size: int, rank: int) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


class _P2P:
    """What get_pp_rank_microbatches reads of a P2PCommunicator."""

    def __init__(self, pp: int, rank: int, vp: int) -> None:
        self.pp_group = _Group(pp, rank)
        self.virtual_pipeline_model_parallel_size = vp


class ScheduleTest(unittest.TestCase):
    def test_megatron_example_table(self) -> None:
        # schedules.py's comment: "PP2 N3M5 with VP2", microbatch 0 1 2 0 1 2 3 4 3 4, chunk 0 0 0 1 1 1 0 0 1 1
        t = S.schedule_table(5, 2, 3)
        self.assertEqual([m for m, _ in t], [0, 1, 2, 0, 1, 2, 3, 4, 3, 4])
        self.assertEqual([c for _, c in t], [0, 0, 0, 1, 1, 1, 0, 0, 1, 1])

    def test_one_f_one_b(self) -> None:
        f = [("forward", 0, 0), ("forward", 1, 0), ("backward", 0, 0), ("forward", 2, 0), ("backward", 1, 0),
             ("backward", 2, 0)]
        self.assertEqual(S.one_f_one_b(2, 0, 3), f)
        self.assertEqual(S.one_f_one_b(3, 0, 1), [("forward", 0, 0), ("backward", 0, 0)])  # warmup capped at M
        self.assertEqual(S.stage_order(2, 0, 3, 1), f)

    def test_interleaved_by_hand(self) -> None:
        # P 2, V 2, M 2: rank 0 warms up (2-0-1)*2 + (2-1)*2 = 4 = every forward; rank 1 warms up 2
        self.assertEqual(S.interleaved(2, 0, 2, 2), [("forward", 0, 0), ("forward", 1, 0), ("forward", 0, 1),
                                                    ("forward", 1, 1), ("backward", 0, 1), ("backward", 1, 1),
                                                    ("backward", 0, 0), ("backward", 1, 0)])
        self.assertEqual(S.interleaved(2, 1, 2, 2), [("forward", 0, 0), ("forward", 1, 0), ("forward", 0, 1),
                                                    ("backward", 0, 1), ("forward", 1, 1), ("backward", 1, 1),
                                                    ("backward", 0, 0), ("backward", 1, 0)])

    def test_every_event_once_and_backwards_after_forwards(self) -> None:
        for pp in (2, 3, 4):
            for vp in (2, 3):
                for m in (pp, 2 * pp, 3 * pp):
                    for s in range(pp):
                        ev = S.interleaved(pp, s, m, vp)
                        want = {(k, b, c) for k in ("forward", "backward") for b in range(m) for c in range(vp)}
                        self.assertEqual(sorted(ev), sorted(want), (pp, s, m, vp))
                        at = {e: i for i, e in enumerate(ev)}
                        for b in range(m):
                            for c in range(vp):
                                self.assertLess(at[("forward", b, c)], at[("backward", b, c)])
                                if c:  # a chunk's forward after the chunk before it on this rank
                                    self.assertLess(at[("forward", b, c - 1)], at[("forward", b, c)])

    def test_against_megatron_core(self) -> None:
        for wheel in megatron_wheels(self):
            ns = megatron_functions(wheel)
            compared = 0
            for pp in (2, 3, 4):
                for vp in (2, 3, 4):
                    for m in range(pp, 4 * pp + 1, pp):
                        table: List[Tuple[int, int]] = [tuple(x) for x in ns["get_schedule_table"](m, vp, pp)]
                        self.assertEqual(S.schedule_table(m, vp, pp), table, (wheel, pp, vp, m))
                        for s in range(pp):
                            total, _, warm, rest = ns["get_pp_rank_microbatches"](m, vp, pp, p2p_communicator=_P2P(pp, s, vp))
                            ev = S.interleaved(pp, s, m, vp)
                            self.assertEqual(len(ev), 2 * total)
                            # the warmup forwards, then (in the steady phase) one forward before each backward
                            first_b = next(i for i, e in enumerate(ev) if e[0] == "backward")
                            self.assertEqual(first_b, warm + 1 if rest else total, (wheel, pp, s, vp, m))
                            compared += 1
            self.assertGreater(compared, 100)


@unittest.skipUnless(HAVE_TORCH, "needs torch (frameworks/torch/pipeline.py imports it)")
class LayerOffsetTest(unittest.TestCase):
    def test_stage_layers_are_megatron_cores(self) -> None:
        wheels = megatron_wheels(self)
        from recap_drivers.core.layout import stage_layers

        for wheel in wheels:
            offset = megatron_layer_offset(wheel)
            compared = 0
            with _StandInModules():
                for pp in (2, 3, 4):
                    for vp in (1, 2, 3):
                        for n in range(pp * vp, 4 * pp * vp + 1, pp * vp):
                            cfg = types.SimpleNamespace(
                                pipeline_model_parallel_size=pp, num_layers=n, pipeline_model_parallel_layout=None,
                                num_layers_in_first_pipeline_stage=None, num_layers_in_last_pipeline_stage=None,
                                account_for_embedding_in_pipeline_split=False, account_for_loss_in_pipeline_split=False,
                                virtual_pipeline_model_parallel_size=vp if vp > 1 else None)
                            ours = stage_layers(n, pp, vp)
                            for s in range(pp):
                                for c in range(vp):
                                    got = offset(cfg, vp_stage=c if vp > 1 else None, pp_rank=s)
                                    self.assertEqual(ours[c * pp + s][0], got, (os.path.basename(wheel), pp, vp, n, s, c))
                                    compared += 1
            self.assertGreater(compared, 200)


if __name__ == "__main__":
    unittest.main()
