"""The observer's runaway-backward check (core.errors.RunawayBackward), on the CPU: a reentrant
checkpoint whose function returns a parameter (as megatron-core's MLP returns its fc2 bias with
skip_bias_add) rewires that parameter's grad_fn to the checkpoint node, and the backward re-enters
that node without end (results/FINDINGS.md M7). The check must end such a backward with a named
error, and must not fire on a correct checkpointed step of the same size."""

from __future__ import annotations

import threading
import unittest
from typing import Dict, Optional

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
        # without the check this backward does not end; a watchdog thread makes that a failure
        # rather than a hung test
        result: Dict[str, Optional[BaseException]] = {}

        def run():
            try:
                self.step(returns_bias=True)
                result["error"] = None
            except RunawayBackward as e:
                result["error"] = e
            except Exception as e:  # pragma: no cover (a different error is a failure below)
                result["error"] = e

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(120)
        self.assertFalse(t.is_alive(), "the runaway backward was not stopped within 120 s")
        self.assertIsInstance(result.get("error"), RunawayBackward, repr(result.get("error")))
        self.assertIn("a backward that does not end", str(result["error"]))


if __name__ == "__main__":
    unittest.main()
