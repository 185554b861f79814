"""Where in torch.cuda.make_graphed_callables (torch 2.11, torch/cuda/graphs.py) a graph is
captured or a failure happened, read from its frames (loop variables, line numbers), so nothing
is patched. Imports torch only when a failure is located."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any, Dict, Optional

from ...core.tracebacks import graph_lines


def mgc_label(graph: Any) -> str:
    """The recap layer of a graph that torch.cuda.make_graphed_callables captures, "" when it is
    not one: read from its frame (torch 2.11, torch/cuda/graphs.py): forward graphs are captured
    in callable order (loop variables func, fwd_graph), backward graphs in reverse order (loop
    variable bwd_graph, an element of bwd_graphs, paired with callables[i] by its index i). The
    callables are the driver's, which carry recap_path."""
    f: Optional[FrameType] = sys._getframe(1)
    while f is not None:
        co = f.f_code
        if co.co_name == "make_graphed_callables" and co.co_filename.replace("\\", "/").endswith("torch/cuda/graphs.py"):
            return mgc_label_in(graph, f.f_locals)
        f = f.f_back
    return ""


def mgc_label_in(graph: Any, loc: Dict[str, Any]) -> str:
    fn = None
    if graph is loc.get("bwd_graph"):
        i = next((i for i, g in enumerate(loc.get("bwd_graphs") or ()) if g is graph), -1)
        cs = loc.get("callables") or ()
        fn = cs[i] if 0 <= i < len(cs) else None
    elif graph is loc.get("fwd_graph"):
        fn = loc.get("func")
    path = getattr(fn, "recap_path", "")
    return path.split(".")[0] if isinstance(path, str) else ""


def locate_in_make_graphed_callables(tb: Any) -> Optional[Dict[str, Any]]:
    """Where in torch.cuda.make_graphed_callables a failure happened: phase (warmup: its own
    warmup iterations; capture: inside torch.cuda.graph), pass and the callable's index. Read from
    the traceback (line numbers and the frame's locals), so nothing is patched."""
    frame = None
    lineno = 0
    while tb is not None:
        co = tb.tb_frame.f_code
        if co.co_name == "make_graphed_callables" and co.co_filename.replace("\\", "/").endswith("torch/cuda/graphs.py"):
            frame, lineno = tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next
    if frame is None:
        return None
    import torch

    capture, grad = graph_lines(torch.cuda.make_graphed_callables)
    loc = frame.f_locals
    phase = "capture" if lineno in capture else "warmup"
    pass_ = "backward" if lineno in grad else "forward"
    index = -1
    try:
        if pass_ == "backward" and phase == "capture" and "bwd_graph" in loc and "bwd_graphs" in loc:
            index = [id(g) for g in loc["bwd_graphs"]].index(id(loc["bwd_graph"]))
        elif "func" in loc and "callables" in loc:
            index = [id(c) for c in loc["callables"]].index(id(loc["func"]))
    except Exception:
        index = -1
    return {"phase": phase, "pass": pass_, "index": index, "line": lineno}
