"""What the torch driver's observation costs a training step.

The observation is core/observe/masks.MaskObserver (a TorchDispatchMode that copies every dropout mask; the
driver pushes it only inside the dropout sites the layers open, and over every op, reading the
allocator around GEMMs, only while graphs are built). This
times the same eager training step of recap's torch model (forward, recap's loss, backward, SGD)
with the observer active and without it, and a full-iteration CUDA-graph replay of that step with
the observer's mask copies captured into the graph and without them. Prints one JSON object:
median milliseconds per step and the overhead ratio of each pair.

  PYTHONPATH=drivers python3 drivers/benchmarks/observe_overhead.py [--hidden 1024 --tokens 512 --blocks 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

from recap_drivers import case as case_mod  # noqa: E402
from recap_drivers.core import layers as layers_mod  # noqa: E402
from recap_drivers.core.observe.masks import MaskObserver  # noqa: E402
from recap_drivers.core.sut import setup_determinism  # noqa: E402


def make_case(hidden, tokens, blocks, dropout):
    layers = [{"kind": "block", "heads": 8, "ffn_hidden": 4 * hidden, "dropout": dropout} for _ in range(blocks)]
    return case_mod.parse_case({"schema": "recap.case/1", "hidden": hidden, "tokens": tokens, "layers": layers,
                                "executor": "eager", "warmup": 1, "replays": 1})


def step_fn(model, x, t, params, lr):
    for p in params:
        p.grad.zero_()
    loss = layers_mod.mse_loss(model(x.detach().requires_grad_(True)), t)
    loss.backward()
    with torch.no_grad():
        for p in params:
            p.add_(p.grad, alpha=-lr)
    return loss


def timed(fn, iters):
    ts = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--iters", type=int, default=30)
    a = ap.parse_args()
    setup_determinism()
    dev = torch.device("cuda")
    c = make_case(a.hidden, a.tokens, a.blocks, a.dropout)
    torch.manual_seed(0)
    model = layers_mod.Model(c, dev)
    for _, p in model.named:
        with torch.no_grad():
            p.normal_(0, 0.02) if p.dim() == 2 else None
        p.grad = torch.zeros_like(p)
    params = model.params
    x = torch.randn(c.tokens, c.hidden, device=dev)
    t = torch.randn(c.tokens, c.hidden, device=dev)
    obs = MaskObserver(dev)
    layers_mod.attach_observer(model, obs)  # the model's dropout sites report to it (when started)
    plan = [((s.layer, s.op, 0, ps), s.numel) for s in case_mod.drop_sites(c) for ps in ("forward", "recompute")]
    obs.plan(plan)

    def plain():
        step_fn(model, x, t, params, 1e-3)

    def observed():  # as the driver observes an eager step: the mode is pushed inside dropout sites
        obs.start()
        try:
            obs.begin_step()
            step_fn(model, x, t, params, 1e-3)
        finally:
            obs.stop()

    def observed_everywhere():  # every op through the observer (what building graphs costs)
        with obs:
            obs.begin_step()
            step_fn(model, x, t, params, 1e-3)

    for f in (plain, observed, observed_everywhere):
        for _ in range(5):
            f()
    res = {"case": {"hidden": a.hidden, "tokens": a.tokens, "blocks": a.blocks, "dropout": a.dropout},
           "device": torch.cuda.get_device_name(dev), "torch": torch.__version__}
    res["eager_ms"] = timed(plain, a.iters)
    res["eager_observed_ms"] = timed(observed, a.iters)
    res["eager_overhead"] = res["eager_observed_ms"] / res["eager_ms"] - 1.0
    res["eager_every_op_observed_ms"] = timed(observed_everywhere, a.iters)
    res["eager_every_op_overhead"] = res["eager_every_op_observed_ms"] / res["eager_ms"] - 1.0

    # full-iteration graphs: the observer's cost at replay is the captured mask copies
    graphs = {}
    for name, observing in (("graph", False), ("graph_observed", True)):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                (observed if observing else plain)()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        if observing:
            obs.start()
            obs.mode = "build"
            with torch.cuda.graph(g):
                step_fn(model, x, t, params, 1e-3)
            obs.mode = "live"
            obs.stop()
        else:
            with torch.cuda.graph(g):
                step_fn(model, x, t, params, 1e-3)
        graphs[name] = g
    for name, g in graphs.items():
        for _ in range(5):
            g.replay()
        res[name + "_replay_ms"] = timed(g.replay, a.iters)
    res["graph_overhead"] = res["graph_observed_replay_ms"] / res["graph_replay_ms"] - 1.0
    res["masks_observed_per_step"] = sum(len(v) for v in obs.graph_keys.values())
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
