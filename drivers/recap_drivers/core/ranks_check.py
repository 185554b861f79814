"""Oracles across the ranks of a rank group's observation (PROTOCOL.md, "Rank groups"), in Python
until recap's C++ side calls them. Each takes the gathered reply (its header, and its frames by
name where it needs them) and returns a verdict:

  {"check": name, "verdict": "passed" | "failed" | "skipped", "reason": one line, "evidence": {...}}

with the counts it judged on (ranks, masks, tensors, elements): no verdict without evidence, a check
that observed nothing is skipped with the reason. No torch here.

  recompute_equal        on every rank, every recompute draw equals its forward draw, and every
                         checkpointed forward draw was recomputed
  tp_masks_differ        draws inside tensor-parallel regions (`ranks.tp_sites`) differ between every
                         two ranks; small masks coincide by chance, so a pair fails only when the
                         chance of its coincidences is below 1e-6 (planted: tp-seed-shared)
  outside_masks_equal    draws outside those regions are equal on every rank (dp-seed-per-rank)
  grads_match_one_rank   the group's full gradients and parameters (shards assembled) equal a one-rank
                         run's of the same case and frames within a relative L2 tolerance: the group
                         sums partial products in another order, so bitwise equality is not expected
                         (tp-grad-not-reduced). Skipped when draws inside regions exist (the group draws
                         them from per-rank generators, the one-rank run from its default one).
"""

from __future__ import annotations

import math
from array import array
from typing import Any, Dict, List, Optional, Tuple

# models/check.h kTolF32 (and kTolBf16Stack for bf16): relative L2 bounds from the arithmetic
TOL_F32 = 1e-5
TOL_BF16 = 4e-2
# a coincidence of masks is a finding when chance alone would give it less often than this
CHANCE = 1e-6

MaskKey = Tuple[int, str, str, int, int]  # (step, layer, op, microbatch, index)


def verdict(check: str, v: str, reason: str, **evidence: Any) -> Dict[str, Any]:
    return {"check": check, "verdict": v, "reason": " ".join(reason.split()), "evidence": evidence}


def _per_rank(h: Dict[str, Any]) -> List[Dict[str, List[Dict[str, Any]]]]:
    """rank -> step -> its mask entries, from steps[].ranks (one rank: steps[].masks)."""
    world = int(h.get("ranks", {}).get("world", 1))
    out: List[Dict[str, List[Dict[str, Any]]]] = [{} for _ in range(world)]
    for s in h.get("steps", []):
        rows = s.get("ranks")
        if rows is None:
            out[0][str(s["step"])] = list(s.get("masks", []))
            continue
        for row in rows:
            out[int(row["rank"])][str(s["step"])] = list(row.get("masks", []))
    return out


def _key(step: str, m: Dict[str, Any]) -> MaskKey:
    return (int(step), m["layer"], m["op"], int(m["microbatch"]), int(m.get("index", 0)))


def recompute_equal(h: Dict[str, Any]) -> Dict[str, Any]:
    name = "recompute_equal"
    ranks = _per_rank(h)
    compared = 0
    bad: List[str] = []
    for r, steps in enumerate(ranks):
        for step, masks in steps.items():
            fwd = {_key(step, m): m for m in masks if m["pass"] == "forward"}
            rec = {_key(step, m): m for m in masks if m["pass"] == "recompute"}
            for k, m in rec.items():
                compared += 1
                f = fwd.get(k)
                if f is None:
                    bad.append(f"rank {r} step {k[0]} {k[1]} mb {k[3]}: a recompute draw without a forward draw")
                elif f["digest"] != m["digest"]:
                    bad.append(f"rank {r} step {k[0]} {k[1]} mb {k[3]}: recompute {m['digest']} != forward {f['digest']}")
            for k, f in fwd.items():
                if f.get("checkpointed") and k not in rec:
                    bad.append(f"rank {r} step {k[0]} {k[1]} mb {k[3]}: a checkpointed forward draw was not recomputed")
    ev = {"ranks": len(ranks), "recompute_masks": compared, "mismatches": len(bad)}
    if bad:
        return verdict(name, "failed", f"{len(bad)} of {compared} recompute draws: {bad[0]}", **ev)
    if compared == 0:
        return verdict(name, "skipped", "no recompute draw on any rank (no checkpointed dropout)", **ev)
    return verdict(name, "passed", f"{compared} recompute draws on {len(ranks)} ranks equal their forward draws", **ev)


def _site_p(case: Dict[str, Any], layer: str) -> float:
    """The dropout probability of the draw site `layer` ("attention0.core": layer 0's)."""
    head = layer.split(".")[0]
    i = len(head)
    while i > 0 and head[i - 1].isdigit():
        i -= 1
    try:
        return float(case["layers"][int(head[i:])].get("dropout", 0.0))
    except (ValueError, IndexError, KeyError):
        return 0.0


def _log10_chance(p: float, numel: int) -> float:
    """log10 of the chance that two independent masks of numel elements, each kept with 1 - p,
    are equal: (p^2 + (1-p)^2)^numel."""
    q = p * p + (1 - p) * (1 - p)
    return numel * math.log10(q) if 0 < q < 1 else 0.0


def _forward_table(ranks: List[Dict[str, List[Dict[str, Any]]]], inside: bool,
                   sites: List[str]) -> List[Dict[MaskKey, Dict[str, Any]]]:
    out = []
    for steps in ranks:
        t: Dict[MaskKey, Dict[str, Any]] = {}
        for step, masks in steps.items():
            for m in masks:
                if m["pass"] == "forward" and (m["layer"] in sites) == inside:
                    t[_key(step, m)] = m
        out.append(t)
    return out


def tp_masks_differ(h: Dict[str, Any], case: Dict[str, Any]) -> Dict[str, Any]:
    name = "tp_masks_differ"
    sites = list(h.get("ranks", {}).get("tp_sites", []))
    ranks = _per_rank(h)
    tables = _forward_table(ranks, True, sites)
    keys = set().union(*[set(t) for t in tables]) if tables else set()
    ev: Dict[str, Any] = {"ranks": len(ranks), "tp_sites": len(sites), "masks": sum(len(t) for t in tables),
                          "pairs": 0, "coincident": 0}
    if len(ranks) < 2:
        return verdict(name, "skipped", "one rank: nothing to compare across ranks", **ev)
    if not keys:
        return verdict(name, "skipped", "no dropout draw inside a tensor-parallel region", **ev)
    for k in sorted(keys):
        missing = [r for r, t in enumerate(tables) if k not in t]
        if missing:
            return verdict(name, "failed", f"step {k[0]} {k[1]} mb {k[3]}: rank {missing[0]} made no such draw", **ev)
    power = sum(_log10_chance(_site_p(case, k[1]), int(tables[0][k]["numel"])) for k in keys)
    ev["log10_chance_all_equal"] = round(power, 2)
    if power > math.log10(CHANCE):
        return verdict(name, "skipped", f"the masks are too small to tell ranks apart: equal masks on every draw "
                                        f"would happen by chance with probability 10^{power:.1f}", **ev)
    worst: Optional[Tuple[float, str]] = None
    for a in range(len(ranks)):
        for b in range(a + 1, len(ranks)):
            ev["pairs"] += 1
            same = [k for k in keys if tables[a][k]["digest"] == tables[b][k]["digest"]]
            ev["coincident"] += len(same)
            if same:
                chance = sum(_log10_chance(_site_p(case, k[1]), int(tables[a][k]["numel"])) for k in same)
                if worst is None or chance < worst[0]:
                    k0 = sorted(same)[0]
                    worst = (chance, f"ranks {a} and {b} drew equal masks in {len(same)} of {len(keys)} draws inside "
                                     f"tensor-parallel regions (first: step {k0[0]} {k0[1]} mb {k0[3]}; chance 10^{chance:.1f})")
    if worst is not None and worst[0] < math.log10(CHANCE):
        return verdict(name, "failed", worst[1], **ev)
    return verdict(name, "passed", f"{len(keys)} draws inside tensor-parallel regions differ across {len(ranks)} ranks"
                                   + (f" ({ev['coincident']} equal by chance)" if ev["coincident"] else ""), **ev)


def outside_masks_equal(h: Dict[str, Any]) -> Dict[str, Any]:
    name = "outside_masks_equal"
    sites = list(h.get("ranks", {}).get("tp_sites", []))
    ranks = _per_rank(h)
    tables = _forward_table(ranks, False, sites)
    ev = {"ranks": len(ranks), "masks": sum(len(t) for t in tables)}
    if len(ranks) < 2:
        return verdict(name, "skipped", "one rank: nothing to compare across ranks", **ev)
    if not any(tables):
        return verdict(name, "skipped", "no dropout draw outside the tensor-parallel regions", **ev)
    ref = tables[0]
    for r, t in enumerate(tables[1:], start=1):
        for k in sorted(set(ref) | set(t)):
            a, b = ref.get(k), t.get(k)
            if a is None or b is None:
                return verdict(name, "failed", f"step {k[0]} {k[1]} mb {k[3]}: rank {0 if a is None else r} made no "
                                               f"such draw", **ev)
            if a["digest"] != b["digest"]:
                return verdict(name, "failed", f"step {k[0]} {k[1]} mb {k[3]}: rank {r} drew {b['digest']}, rank 0 "
                                               f"{a['digest']} (outside tensor-parallel regions masks are equal)", **ev)
    return verdict(name, "passed", f"{len(ref)} draws outside tensor-parallel regions equal on {len(ranks)} ranks", **ev)


def _floats(f: Any) -> array:
    a = array("f")
    a.frombytes(f.data)
    return a


def rel_l2(a: Any, b: Any) -> float:
    """||a - b|| / ||b|| (||a|| when b is zero), in double."""
    x, y = _floats(a), _floats(b)
    num = math.fsum((p - q) * (p - q) for p, q in zip(x, y))
    den = math.fsum(q * q for q in y)
    if den == 0.0:
        return math.sqrt(num)
    return math.sqrt(num / den)


def grads_match_one_rank(h: Dict[str, Any], frames: Dict[str, Any], one: Dict[str, Any], one_frames: Dict[str, Any],
                         case: Dict[str, Any], tol: Optional[float] = None) -> Dict[str, Any]:
    name = "grads_match_one_rank"
    tol = tol if tol is not None else (TOL_BF16 if case.get("dtype", "fp32") == "bf16" else TOL_F32)
    ev: Dict[str, Any] = {"ranks": int(h.get("ranks", {}).get("world", 1)), "tensors": 0, "elements": 0,
                          "replicated_compared": 0, "tolerance": tol}
    if h.get("status") != "ok" or one.get("status") != "ok":
        return verdict(name, "skipped", f"a run did not complete (group {h.get('status')}, one rank "
                                        f"{one.get('status')})", **ev)
    sites = list(h.get("ranks", {}).get("tp_sites", []))
    ranks = _per_rank(h)
    inside = _forward_table(ranks, True, sites)
    if inside and inside[0]:
        return verdict(name, "skipped", f"{len(inside[0])} draws inside tensor-parallel regions come from per-rank "
                                        "generators, a one-rank run draws others: its gradients differ by design", **ev)
    group_masks = _forward_table(ranks, False, sites)[0]
    one_masks = _forward_table(_per_rank(one), False, [])[0]
    ev["masks_compared"] = len(one_masks)
    for k in sorted(set(group_masks) | set(one_masks)):
        a, b = group_masks.get(k), one_masks.get(k)
        if a is None or b is None or a["digest"] != b["digest"]:
            return verdict(name, "failed", f"step {k[0]} {k[1]} mb {k[3]}: rank 0 drew "
                                           f"{a['digest'] if a else 'nothing'}, the one-rank run "
                                           f"{b['digest'] if b else 'nothing'}", **ev)
    if len(h.get("steps", [])) != len(one.get("steps", [])):
        return verdict(name, "failed", f"{len(h.get('steps', []))} steps against the one-rank run's "
                                       f"{len(one.get('steps', []))}", **ev)
    worst = (0.0, "")
    for n, b in sorted(one_frames.items()):
        if not (n.startswith("grad ") or n.startswith("param ")):
            continue
        a = frames.get(n)
        if a is None:
            return verdict(name, "failed", f"the group's reply has no frame '{n}'", **ev)
        if tuple(a.shape) != tuple(b.shape):
            return verdict(name, "failed", f"'{n}': shape {list(a.shape)} against {list(b.shape)}", **ev)
        e = rel_l2(a, b)
        ev["tensors"] += 1
        ev["elements"] += len(a.data) // 4
        if e > worst[0]:
            worst = (e, n)
        if not e <= tol:  # NaN fails too
            ev["worst_rel_l2"] = e
            return verdict(name, "failed", f"'{n}': relative L2 error {e:.3g} > {tol:g} against the one-rank run", **ev)
    # parameters every rank holds whole: their gradients agree across ranks
    shards = h.get("ranks", {}).get("shards", [])
    world = ev["ranks"]
    for n in sorted(frames):
        parts = n.split(" @")
        if len(parts) != 2 or not parts[0].startswith("grad ") or parts[1] != "0":
            continue
        i = int(parts[0].split()[-1])
        if i >= len(shards) or shards[i].get("dim") is not None:
            continue
        for r in range(1, world):
            other = frames.get(f"{parts[0]} @{r}")
            if other is None:
                return verdict(name, "failed", f"no frame '{parts[0]} @{r}'", **ev)
            ev["replicated_compared"] += 1
            e = rel_l2(other, frames[n])
            if not e <= tol:
                return verdict(name, "failed", f"'{parts[0]}' of a replicated parameter: rank {r} differs from rank 0 "
                                               f"by {e:.3g}", **ev)
    ev["worst_rel_l2"] = worst[0]
    if ev["tensors"] == 0:
        return verdict(name, "skipped", "no gradient or parameter frame to compare", **ev)
    return verdict(name, "passed", f"{ev['tensors']} tensors ({ev['elements']} elements) within {tol:g} of the one-rank "
                                   f"run (worst {worst[0]:.2g}: '{worst[1]}')", **ev)


def check_all(h: Dict[str, Any], frames: Dict[str, Any], case: Dict[str, Any],
              one: Optional[Tuple[Dict[str, Any], Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """Every check; the gradient check only with a one-rank run's (header, frames)."""
    out = [recompute_equal(h), tp_masks_differ(h, case), outside_masks_equal(h)]
    if one is not None:
        out.append(grads_match_one_rank(h, frames, one[0], one[1], case))
    else:
        out.append(verdict("grads_match_one_rank", "skipped", "no one-rank run to compare with",
                           ranks=int(h.get("ranks", {}).get("world", 1)), tensors=0))
    return out
