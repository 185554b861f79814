"""The observer's runaway-backward check (core.errors.RunawayBackward), on the CPU: a reentrant
checkpoint whose function returns a parameter (as megatron-core's MLP returns its fc2 bias with
skip_bias_add) rewires that parameter's grad_fn to the checkpoint node, and the backward re-enters
that node without end (results/FINDINGS.md M7). The check must end such a backward with a named
error, and must not fire on a correct checkpointed step of the same size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest
from typing import Optional

from tests.helpers import HAVE_TORCH

if HAVE_TORCH:
    import torch

    from recap_drivers.core.errors import RunawayBackward
    from recap_drivers.core.observe.masks import MaskObserver

    class Checkpoint(torch.autograd.Function):
        """torch.utils.checkpoint's reentrant scheme as megatron-core's CheckpointFunction writes it:
        the outputs of a no-grad forward, recomputed in backward and differentiated with
        torch.autograd.backward (megatron/core/tensor_parallel/random.py)."""

        @staticmethod
        def forward(ctx, run, x):
            ctx.run = run
            ctx.save_for_backward(x)
            with torch.no_grad():
                return run(x)

        @staticmethod
        def backward(ctx, *grads):
            (x,) = ctx.saved_tensors
            x = x.detach().requires_grad_()
            with torch.enable_grad():
                outs = ctx.run(x)
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad and g is not None]
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
            return None, x.grad


@unittest.skipUnless(HAVE_TORCH, "torch is not installed")
class RunawayBackwardTest(unittest.TestCase):
    def step(self, returns_bias: bool):
        torch.manual_seed(0)
        lin = torch.nn.Linear(8, 8)
        bias = torch.nn.Parameter(torch.zeros(8))

        def mlp(x):  # (output, bias) as megatron's MLP with skip_bias_add returns them
            y = torch.tanh(lin(x))
            return (y, bias) if returns_bias else (y, torch.zeros((), requires_grad=False))

        obs = MaskObserver("cpu")
        obs.site_resolver = lambda: None  # the mode is pushed for the whole run, as for megatron
        try:
            obs.start()
            obs.begin_step()
            x = torch.randn(4, 8, requires_grad=True)
            h = x
            for _ in range(3):
                y, b = Checkpoint.apply(mlp, h)
                h = y + b
            h.sum().backward()
        finally:
            obs.stop()
            obs.site_resolver = None
        return obs, lin

    def test_correct_checkpoint_does_not_fire(self):
        obs, lin = self.step(returns_bias=False)
        self.assertGreater(obs.backward_ops, obs.forward_ops)  # the check saw the recomputes
        self.assertIsNotNone(lin.weight.grad)

    def test_self_reentrant_recompute_is_named(self):
        # Run in a child process that ends with os._exit, as the driver does: torch's reentrant
        # backward leaves pool threads that can abort interpreter teardown ("terminate called
        # without an active exception", about 1 run in 10 under load), which is torch's exit,
        # not the check. The timeout makes a backward that does not end a failure, not a hang.
        child = subprocess.run([sys.executable, "-m", "tests.test_runaway", "runaway"],
                               cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(child.returncode, 0, child.stderr[-2000:])
        error = json.loads(child.stdout.strip().splitlines()[-1])
        self.assertEqual(error["type"], RunawayBackward.__name__, error)
        self.assertIn("a backward that does not end", error["message"])


def runaway_child() -> None:
    """The self-reentrant step, in this process; prints its error as one JSON line."""
    error: Optional[BaseException] = None
    try:
        RunawayBackwardTest().step(returns_bias=True)
    except Exception as e:  # a different error is a failure in the parent
        error = e
    print(json.dumps({"type": type(error).__name__ if error else None,
                      "message": str(error) if error else ""}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:] == ["runaway"]:
        runaway_child()
    unittest.main()
