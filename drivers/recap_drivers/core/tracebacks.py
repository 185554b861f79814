"""Where a failure happened, read from its traceback (frame locals and line numbers), so that
nothing of the framework is patched to report it."""

from __future__ import annotations

import ast
import inspect
from typing import Any, Callable, Dict, Set, Tuple


def layer_from_traceback(tb: Any) -> str:
    """The innermost recap layer a traceback passes through: a module's forward (self) or a
    reentrant checkpoint's CheckpointFunction.backward (ctx.run_function)."""
    found = ""
    while tb is not None:
        loc = tb.tb_frame.f_locals
        for cand in (loc.get("self"), getattr(loc.get("ctx"), "run_function", None), loc.get("function"),
                     loc.get("fn")):
            path = getattr(cand, "recap_path", None)
            if isinstance(path, str) and path:
                found = path
        tb = tb.tb_next
    return found.split(".")[0] if found else ""


_GRAPH_LINES: Dict[object, Tuple[Set[int], Set[int]]] = {}


def graph_lines(fn: Callable[..., Any]) -> Tuple[Set[int], Set[int]]:
    """Absolute line numbers of a framework function's body: those inside a
    `with torch.cuda.graph(...)` block (capture), and those of statements that call
    torch.autograd.grad (its backward). Read once per function from its source, so that a
    traceback's line tells warmup from capture without patching anything."""
    key = getattr(fn, "__code__", fn)
    if key in _GRAPH_LINES:
        return _GRAPH_LINES[key]
    capture: Set[int] = set()
    grad: Set[int] = set()
    try:
        import textwrap

        src, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(src)))
        for node in ast.walk(tree):
            if isinstance(node, ast.With):
                for item in node.items:
                    ce = item.context_expr
                    f = ce.func if isinstance(ce, ast.Call) else None
                    if (getattr(f, "attr", None) or getattr(f, "id", None)) == "graph":
                        capture.update(range(node.lineno + start - 1, (node.end_lineno or node.lineno) + start))
            if isinstance(node, (ast.Assign, ast.Expr, ast.AnnAssign)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Call) and getattr(sub.func, "attr", None) == "grad":
                        grad.update(range(node.lineno + start - 1, (node.end_lineno or node.lineno) + start))
    except Exception:
        pass
    _GRAPH_LINES[key] = (capture, grad)
    return capture, grad
