"""Oracles across the ranks of a rank group's observation (PROTOCOL.md, "Rank groups"), in Python
until recap's C++ side calls them. Each takes the gathered reply (its header, and its frames by
name where it needs them) and returns a verdict:

  {"check": name, "verdict": "passed" | "failed" | "skipped", "reason": one line, "evidence": {...}}

with the counts it judged on (ranks, masks, tensors, elements): no verdict without evidence, a check
that observed nothing is skipped with the reason. No torch here.

  recompute_equal        on every rank, every recompute draw equals its forward draw, and every
                         checkpointed forward draw was recomputed
  tp_masks_differ        draws inside tensor-parallel regions (`ranks.tp_sites`; with sequence parallelism,
                         `ranks.sp`, every draw site: on the rank's rows) differ between every
                         two ranks; small masks coincide by chance, so a pair fails only when the
                         chance of its coincidences is below 1e-6 (planted: tp-seed-shared)
  outside_masks_equal    draws outside those regions are equal on every rank (dp-seed-per-rank)
  grads_match_one_rank   the group's full gradients and parameters (shards assembled) equal a one-rank
                         run's of the same case and frames within a relative L2 tolerance (twice
                         models/check.h's bound: each run is within it of the exact result): the group
                         sums partial products in another order, so bitwise equality is not expected
                         (tp-grad-not-reduced). Skipped when draws inside regions exist (the group draws
                         them from per-rank generators, the one-rank run from its default one). A
                         pipeline group of tp 1 computes every layer as one rank does: bitwise equal
                         (pp-send-stale); skipped when a stage after the first draws (its seed is
                         seed + 100 * stage, the one-rank run's is not).
  pp_schedule_1f1b       every stage's forward and backward events, as it ran them, are megatron-core's
                         1F1B order for the stages, microbatches and model chunks observed: the
                         non-interleaved one, or the interleaved one where a rank ran several chunks
                         (core/schedules.py; pp-schedule-gpipe)
  pp_stage_masks_differ  stages draw from their own streams: the j-th draw of a microbatch on two
                         stages, of equal size and probability, differ beyond chance (pp-stage-seed-shared)

With pipeline stages (`ranks.stages`), the mask checks compare ranks of one stage only: other
stages run other layers from other seeds. With tp inside the stages, each rank is compared with the
first rank of its stage, and grads_match_one_rank is within the tolerance, not bitwise.
"""

from __future__ import annotations

import math
from array import array
from typing import Any, Dict, List, Optional, Set, Tuple

from .schedules import Event, stage_order

# models/check.h's relative L2 bounds of one run against the exact result: kTolF32; bf16
# kTolBf16Layer for one layer that is not attention or a block, else kTolBf16Stack scaled by
# depth / kBf16StackDepth past that depth (check.cpp tolerance())
TOL_F32 = 1e-5
TOL_BF16_LAYER = 2e-2
TOL_BF16 = 4e-2
BF16_STACK_DEPTH = 4


def tolerance(case: Dict[str, Any]) -> float:
    """The bound between a group's run and a one-rank run: each within models/check.h's bound of
    the exact result, so the two within twice it."""
    if case.get("dtype", "fp32") != "bf16":
        return 2 * TOL_F32
    layers = case.get("layers", [])
    if len(layers) == 1 and layers[0].get("kind") not in ("attention", "block"):
        return 2 * TOL_BF16_LAYER
    return 2 * TOL_BF16 * max(1.0, len(layers) / BF16_STACK_DEPTH)
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


def _stages(h: Dict[str, Any]) -> List[int]:
    """Every rank's pipeline stage (all 0 without pipeline stages)."""
    g = h.get("ranks", {})
    world = int(g.get("world", 1))
    st = g.get("stages")
    return [int(x) for x in st] if isinstance(st, list) and len(st) == world else [0] * world


def _pp(h: Dict[str, Any]) -> int:
    return len(set(_stages(h)))


def _replicas(h: Dict[str, Any]) -> List[int]:
    """Every rank's data-parallel replica (all 0 without replicas)."""
    g = h.get("ranks", {})
    world = int(g.get("world", 1))
    rp = g.get("replicas")
    return [int(x) for x in rp] if isinstance(rp, list) and len(rp) == world else [0] * world


def _cells(h: Dict[str, Any]) -> List[Tuple[int, int]]:
    """Every rank's (stage, replica): the ranks of a cell run the same layers on the same data (its
    tensor-parallel group), so the mask checks compare ranks of one cell only."""
    return list(zip(_stages(h), _replicas(h)))


def _dp(h: Dict[str, Any]) -> int:
    return len(set(_replicas(h)))


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


def _layer_of(site: str) -> int:
    """The top-level layer of the draw site `site` ("attention0.core": 0), -1 when it names none."""
    head = site.split(".")[0]
    i = len(head)
    while i > 0 and head[i - 1].isdigit():
        i -= 1
    return int(head[i:]) if i < len(head) else -1


def _site_p(case: Dict[str, Any], layer: str) -> float:
    """The dropout probability of the draw site `layer` ("attention0.core": layer 0's)."""
    i = _layer_of(layer)
    try:
        return float(case["layers"][i].get("dropout", 0.0)) if i >= 0 else 0.0
    except (IndexError, KeyError):
        return 0.0


def _later_draw(h: Dict[str, Any], ranks: List[Dict[str, List[Dict[str, Any]]]], sites: List[str]) -> str:
    """Why a pipeline group cannot draw what one rank draws, "" when it can: a stage after the first
    draws (megatron's _set_random_seed seeds stage s with seed + 100 * s), or the first stage draws
    in a later model chunk (its chunks share its generator in the interleaved order, one rank draws
    layer after layer)."""
    stages = _stages(h)
    first = (h.get("ranks", {}).get("stage_layers") or [[0, 1 << 30]])[0] or [0, 1 << 30]
    for r, t in enumerate(_forward_table(ranks, False, sites)):
        for k in sorted(t):
            if stages[r] > 0:
                return (f"stage {stages[r]} draws ({k[1]}): a stage is seeded seed + 100 * stage (megatron's "
                        "_set_random_seed), the one-rank run draws others")
            layer = _layer_of(k[1])
            if layer >= 0 and not first[0] <= layer < first[1]:
                return (f"stage 0 draws in a later model chunk ({k[1]}): its chunks draw one generator in the "
                        "interleaved order, the one-rank run layer after layer")
    return ""


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
    # with sequence parallelism every draw is per-rank: on the rank's heads or on its rows
    inside = ("inside tensor-parallel regions or on sequence-parallel rows" if h.get("ranks", {}).get("sp")
              else "inside tensor-parallel regions")
    ranks = _per_rank(h)
    tables = _forward_table(ranks, True, sites)
    keys = set().union(*[set(t) for t in tables]) if tables else set()
    ev: Dict[str, Any] = {"ranks": len(ranks), "tp_sites": len(sites), "masks": sum(len(t) for t in tables),
                          "pairs": 0, "coincident": 0}
    if len(ranks) < 2:
        return verdict(name, "skipped", "one rank: nothing to compare across ranks", **ev)
    if len(set(_cells(h))) == len(ranks):
        return verdict(name, "skipped", f"{_one_rank_cells(h)}: no tensor-parallel region", **ev)
    if not keys:
        return verdict(name, "skipped", "no dropout draw inside a tensor-parallel region", **ev)
    stages = _cells(h)  # the ranks of one stage and replica run the same layers and data
    numel: Dict[MaskKey, int] = {}
    for k in sorted(keys):  # every rank of a stage that drew it (the stage's layers) drew it too
        have = {stages[r] for r, t in enumerate(tables) if k in t}
        missing = [r for r, t in enumerate(tables) if stages[r] in have and k not in t]
        if missing:
            return verdict(name, "failed", f"step {k[0]} {k[1]} mb {k[3]}: rank {missing[0]} made no such draw", **ev)
        numel[k] = int(next(t[k] for t in tables if k in t)["numel"])
    power = sum(_log10_chance(_site_p(case, k[1]), numel[k]) for k in keys)
    ev["log10_chance_all_equal"] = round(power, 2)
    if power > math.log10(CHANCE):
        return verdict(name, "skipped", f"the masks are too small to tell ranks apart: equal masks on every draw "
                                        f"would happen by chance with probability 10^{power:.1f}", **ev)
    worst: Optional[Tuple[float, str]] = None
    for a in range(len(ranks)):
        for b in range(a + 1, len(ranks)):
            if stages[a] != stages[b]:  # other layers, other seeds; or another replica, seeded alike
                continue
            ev["pairs"] += 1
            same = [k for k in keys if k in tables[a] and k in tables[b] and tables[a][k]["digest"] == tables[b][k]["digest"]]
            ev["coincident"] += len(same)
            if same:
                chance = sum(_log10_chance(_site_p(case, k[1]), numel[k]) for k in same)
                if worst is None or chance < worst[0]:
                    k0 = sorted(same)[0]
                    worst = (chance, f"ranks {a} and {b} drew equal masks in {len(same)} of {len(keys)} draws {inside} "
                                     f"(first: step {k0[0]} {k0[1]} mb {k0[3]}; chance 10^{chance:.1f})")
    if worst is not None and worst[0] < math.log10(CHANCE):
        return verdict(name, "failed", worst[1], **ev)
    return verdict(name, "passed", f"{len(keys)} draws {inside} differ across {len(ranks)} ranks"
                                   + (f" ({ev['coincident']} equal by chance)" if ev["coincident"] else ""), **ev)


def outside_masks_equal(h: Dict[str, Any]) -> Dict[str, Any]:
    name = "outside_masks_equal"
    sites = list(h.get("ranks", {}).get("tp_sites", []))
    ranks = _per_rank(h)
    tables = _forward_table(ranks, False, sites)
    ev = {"ranks": len(ranks), "masks": sum(len(t) for t in tables)}
    if len(ranks) < 2:
        return verdict(name, "skipped", "one rank: nothing to compare across ranks", **ev)
    stages = _cells(h)  # the ranks of one stage and replica run the same layers and data
    if len(set(stages)) == len(ranks):
        return verdict(name, "skipped", f"{_one_rank_cells(h)}: no two ranks run the same layers on the same data",
                       **ev)
    if not any(tables):
        return verdict(name, "skipped", "no dropout draw outside the tensor-parallel regions", **ev)
    for r, t in enumerate(tables):
        r0 = stages.index(stages[r])  # only ranks of one stage run the same layers: each against its first
        if r0 == r:
            continue
        ref = tables[r0]
        for k in sorted(set(ref) | set(t)):
            a, b = ref.get(k), t.get(k)
            if a is None or b is None:
                return verdict(name, "failed", f"step {k[0]} {k[1]} mb {k[3]}: rank {r0 if a is None else r} made no "
                                               f"such draw", **ev)
            if a["digest"] != b["digest"]:
                return verdict(name, "failed", f"step {k[0]} {k[1]} mb {k[3]}: rank {r} drew {b['digest']}, rank {r0} "
                                               f"{a['digest']} (outside tensor-parallel regions masks are equal)", **ev)
    return verdict(name, "passed", f"{len(ref)} draws outside tensor-parallel regions equal on {len(ranks)} ranks", **ev)


def _one_rank_cells(h: Dict[str, Any]) -> str:
    """How a group whose stages and replicas hold one rank each is made, in words."""
    pp, dp = _pp(h), _dp(h)
    if dp == 1:
        return f"{pp} pipeline stages of one rank each"
    if pp == 1:
        return f"{dp} data-parallel replicas of one rank each"
    return f"{pp} pipeline stages of {dp} replicas, one rank each"


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
    tol = tol if tol is not None else tolerance(case)
    ev: Dict[str, Any] = {"ranks": int(h.get("ranks", {}).get("world", 1)), "tensors": 0, "elements": 0,
                          "replicated_compared": 0, "tolerance": tol}
    if h.get("status") != "ok" or one.get("status") != "ok":
        return verdict(name, "skipped", f"a run did not complete (group {h.get('status')}, one rank "
                                        f"{one.get('status')})", **ev)
    sites = list(h.get("ranks", {}).get("tp_sites", []))
    ranks = _per_rank(h)
    inside = _forward_table(ranks, True, sites)
    if any(inside):
        return verdict(name, "skipped", f"{max(len(t) for t in inside)} draws inside tensor-parallel regions come from per-rank "
                                        "generators, a one-rank run draws others: its gradients differ by design", **ev)
    stages = _stages(h)
    cells = _cells(h)
    pipeline = _pp(h) > 1
    dp = _dp(h)
    if dp > 1:
        drawn = sum(len(t) for t in _forward_table(ranks, False, sites))
        if drawn:
            return verdict(name, "skipped", f"{drawn} draws on {dp} data-parallel replicas seeded alike: replica d's "
                                            "j-th microbatch draws what replica 0's j-th draws, a one-rank run draws its "
                                            "microbatches in sequence: its gradients differ by design", **ev)
    # stages of tp 1 compute each layer whole, as one rank does: bitwise equal (tp inside stages
    # sums partial products in another order, and replicas sum their gradients in another order
    # than one rank accumulates them: the tolerance)
    bitwise = pipeline and int(h.get("ranks", {}).get("tp", 1)) == 1 and dp == 1
    # a microbatch's gradient is its replica's accumulation: one rank's up to it for replica 0's only
    local = int(case.get("microbatches", 1)) // dp
    if bitwise:
        tol = 0.0
        ev["tolerance"] = tol
    if pipeline:
        why = _later_draw(h, ranks, sites)
        if why:
            return verdict(name, "skipped", why, **ev)
    first: Dict[MaskKey, Dict[str, Any]] = {}
    for r, t in enumerate(_forward_table(ranks, False, sites)):
        if stages[r] == 0 and not first:
            first = t
    group_masks = first
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
        w = n.split()
        if len(w) == 4 and int(w[2]) >= local:  # another replica's microbatch: its own accumulation
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
        if bitwise and a.data != b.data:
            ev["worst_rel_l2"] = e
            return verdict(name, "failed", f"'{n}': not bitwise equal to the one-rank run (relative L2 {e:.3g}); a "
                                           "pipeline stage computes its layers as one rank does", **ev)
        if not e <= tol:  # NaN fails too
            ev["worst_rel_l2"] = e
            return verdict(name, "failed", f"'{n}': relative L2 error {e:.3g} > {tol:g} against the one-rank run", **ev)
    # parameters every rank holds whole: their gradients agree across ranks
    shards = h.get("ranks", {}).get("shards", [])
    world = ev["ranks"]
    for n in sorted(frames):
        parts = n.split(" @")
        if len(parts) != 2 or not parts[0].startswith("grad ") or not parts[1].isdigit():
            continue
        r0 = int(parts[1])
        if r0 >= world or cells.index(cells[r0]) != r0:  # each cell's first rank against the others of its cell
            continue
        i = int(parts[0].split()[-1])
        if i >= len(shards) or shards[i].get("dim") is not None:
            continue
        for r in range(r0 + 1, world):
            if cells[r] != cells[r0]:  # a parameter of another stage's layer, or another replica's microbatch
                continue
            other = frames.get(f"{parts[0]} @{r}")
            if other is None:
                return verdict(name, "failed", f"no frame '{parts[0]} @{r}'", **ev)
            ev["replicated_compared"] += 1
            e = rel_l2(other, frames[n])
            if not e <= tol:
                return verdict(name, "failed", f"'{parts[0]}' of a replicated parameter: rank {r} differs from rank {r0} "
                                               f"by {e:.3g}", **ev)
    ev["worst_rel_l2"] = worst[0]
    if ev["tensors"] == 0:
        return verdict(name, "skipped", "no gradient or parameter frame to compare", **ev)
    if bitwise:
        return verdict(name, "passed", f"{ev['tensors']} tensors ({ev['elements']} elements) of {_pp(h)} pipeline stages "
                                       f"bitwise equal to the one-rank run's", **ev)
    return verdict(name, "passed", f"{ev['tensors']} tensors ({ev['elements']} elements) within {tol:g} of the one-rank "
                                   f"run (worst {worst[0]:.2g}: '{worst[1]}')", **ev)


def dp_grads_reduced(h: Dict[str, Any], frames: Dict[str, Any], case: Dict[str, Any]) -> Dict[str, Any]:
    """Data-parallel replicas: each rank's step gradients (`grad s i @r`, what its update applied)
    are bitwise equal on every replica of its stage and tensor-parallel rank (an all-reduce gives
    every member the same sum), and equal the sum of the replicas' own accumulations (`grad s m i
    @r` of each replica's last microbatch) within the tolerance (the sum in another order)."""
    name = "dp_grads_reduced"
    g = h.get("ranks", {})
    world, tp = int(g.get("world", 1)), max(1, int(g.get("tp", 1)))
    stages, reps = _stages(h), _replicas(h)
    tol = tolerance(case)
    ev: Dict[str, Any] = {"replicas": _dp(h), "tensors": 0, "elements": 0, "sums": 0, "tolerance": tol}
    if _dp(h) < 2:
        return verdict(name, "skipped", "no data-parallel replicas: nothing reduced across them", **ev)
    if h.get("status") != "ok":
        return verdict(name, "skipped", f"the group's run did not complete ({h.get('status')})", **ev)
    own: Dict[int, Dict[str, Any]] = {r: {} for r in range(world)}  # rank -> its `@r` frames by name
    for n, f in frames.items():
        parts = n.split(" @")
        if len(parts) == 2 and parts[1].isdigit() and int(parts[1]) < world and parts[0].startswith("grad "):
            own[int(parts[1])][parts[0]] = f
    last: Dict[Tuple[int, str], int] = {}  # (rank, step) -> its last microbatch: its replica's own sum
    for r in range(world):
        for x in own[r]:
            w = x.split()
            if len(w) == 4:
                last[(r, w[1])] = max(last.get((r, w[1]), -1), int(w[2]))
    worst = 0.0
    for r in range(world):
        peer = next(q for q in range(world) if stages[q] == stages[r] and q % tp == r % tp)  # replica 0's
        for n, f in sorted(own[r].items()):
            w = n.split()
            if len(w) != 3:
                continue
            if peer != r:
                other = own[peer].get(n)
                if other is None:
                    return verdict(name, "failed", f"rank {r} (replica {reps[r]}) sent '{n} @{r}', rank {peer} "
                                                   "(replica 0) none", **ev)
                ev["tensors"] += 1
                ev["elements"] += len(f.data) // 4
                if other.data != f.data:
                    return verdict(name, "failed", f"'{n}': rank {r} (replica {reps[r]}) applied another gradient than "
                                                   f"rank {peer} (replica 0), relative L2 {rel_l2(f, other):.3g}: the "
                                                   "replicas' gradients were not summed over them", **ev)
                continue
            # the sum of the replicas' own accumulations, each its last microbatch's
            members = [q for q in range(world) if stages[q] == stages[r] and q % tp == r % tp]
            total: Optional[array] = None
            for q in members:
                part_frame = own[q].get(f"grad {w[1]} {last.get((q, w[1]), -1)} {w[2]}")
                if part_frame is None:
                    return verdict(name, "failed", f"rank {q} sent no microbatch gradient of '{n}'", **ev)
                part = _floats(part_frame)
                total = part if total is None else array("f", (a + b for a, b in zip(total, part)))
            assert total is not None
            e = rel_l2(f, _Raw(total))
            ev["sums"] += 1
            worst = max(worst, e) if e == e else math.inf
            if not e <= tol:
                return verdict(name, "failed", f"'{n}' on rank {r}: relative L2 error {e:.3g} > {tol:g} against the sum "
                                               f"of its {len(members)} replicas' own gradients", **ev)
    ev["worst_rel_l2"] = worst
    if ev["sums"] == 0:
        return verdict(name, "skipped", "no rank sent its step gradients", **ev)
    return verdict(name, "passed", f"{ev['tensors']} step gradients ({ev['elements']} elements) bitwise equal across "
                                   f"{_dp(h)} replicas; {ev['sums']} within {tol:g} of the sum of the replicas' own "
                                   f"(worst {worst:.2g})", **ev)


class _Raw:
    """A frame-like holder of float32 values (rel_l2 reads .data)."""

    def __init__(self, values: array) -> None:
        self.data = values.tobytes()


def pp_schedule_1f1b(h: Dict[str, Any]) -> Dict[str, Any]:
    """Judged from what the stages observed: the stages that reported events (their count is P),
    each rank's microbatches and model chunks (those it ran), never the case's fields."""
    name = "pp_schedule_1f1b"
    stages = _stages(h)
    pp = _pp(h)
    ev: Dict[str, Any] = {"stages": pp, "schedules": 0, "events": 0}
    if pp < 2:
        return verdict(name, "skipped", "no pipeline stages: nothing scheduled across ranks", **ev)
    vps: Set[int] = set()
    for s in h.get("steps", []):
        for row in s.get("ranks", []):
            got: List[Event] = [(str(e[0]), int(e[1]), int(e[2]) if len(e) > 2 else 0) for e in row.get("schedule", [])]
            if not got:
                continue
            r = int(row["rank"])
            # a replica's microbatches are the step's d * k .. : judged as its 0 .. k - 1, in order
            local = {m: j for j, m in enumerate(sorted({m for _, m, _ in got}))}
            got = [(kind, local[m], k) for kind, m, k in got]
            mbs = len(local)
            vp = len({k for _, _, k in got})
            vps.add(vp)
            want = stage_order(pp, stages[r], mbs, vp)
            ev["schedules"] += 1
            ev["events"] += len(got)
            if got != want:
                i = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                at = _event_name(got, i, vp)
                exp = _event_name(want, i, vp)
                chunks = f", {vp} model chunks" if vp > 1 else ""
                order = "interleaved 1F1B" if vp > 1 else "1F1B"
                return verdict(name, "failed", f"step {s['step']} rank {r} (stage {stages[r]} of {pp}, {mbs} microbatches"
                                               f"{chunks}): event {i} was the {at}, {order} runs the {exp}", **ev)
    if ev["schedules"] == 0:
        return verdict(name, "skipped", "no stage reported its schedule", **ev)
    ev["model_chunks"] = max(vps)
    if max(vps) > 1:
        return verdict(name, "passed", f"{ev['schedules']} stage schedules ({ev['events']} events) are interleaved 1F1B "
                                       f"over {pp} stages of {max(vps)} model chunks", **ev)
    return verdict(name, "passed", f"{ev['schedules']} stage schedules ({ev['events']} events) are 1F1B over {pp} stages",
                   **ev)


def _event_name(events: List[Event], i: int, vp: int) -> str:
    if i >= len(events):
        return "nothing"
    kind, m, k = events[i]
    return f"{kind} of microbatch {m}" + (f" on chunk {k}" if vp > 1 else "")


def pp_stage_masks_differ(h: Dict[str, Any], case: Dict[str, Any]) -> Dict[str, Any]:
    """The j-th forward draw of a (step, microbatch) on two stages, of equal size and probability:
    equal masks there come from one stream, unless chance (as tp_masks_differ)."""
    name = "pp_stage_masks_differ"
    stages = _stages(h)
    ev: Dict[str, Any] = {"stages": _pp(h), "pairs": 0, "coincident": 0}
    if _pp(h) < 2:
        return verdict(name, "skipped", "no pipeline stages: nothing to compare across stages", **ev)
    ranks = _per_rank(h)
    first: Dict[int, int] = {}
    for r, st in enumerate(stages):
        first.setdefault(st, r)
    # per stage: (step, microbatch, j) -> the draw
    seq: Dict[int, Dict[Tuple[int, int, int], Dict[str, Any]]] = {}
    for st, r in first.items():
        t: Dict[Tuple[int, int, int], Dict[str, Any]] = {}
        count: Dict[Tuple[int, int], int] = {}
        for step, masks in ranks[r].items():
            for m in masks:
                if m["pass"] != "forward":
                    continue
                k = (int(step), int(m["microbatch"]))
                j = count.get(k, 0)
                count[k] = j + 1
                t[(k[0], k[1], j)] = m
        seq[st] = t
    power = 0.0
    same_chance = 0.0
    first_same = ""
    order = sorted(seq)
    for ia, a in enumerate(order):
        for b in order[ia + 1:]:
            for pos in sorted(set(seq[a]) & set(seq[b])):
                x, y = seq[a][pos], seq[b][pos]
                p = _site_p(case, x["layer"])
                if int(x["numel"]) != int(y["numel"]) or p != _site_p(case, y["layer"]):
                    continue
                ev["pairs"] += 1
                c = _log10_chance(p, int(x["numel"]))
                power += c
                if x["digest"] == y["digest"]:
                    ev["coincident"] += 1
                    same_chance += c
                    if not first_same:
                        first_same = (f"step {pos[0]} mb {pos[1]} draw {pos[2]}: stage {a} ({x['layer']}) and stage {b} "
                                      f"({y['layer']}) drew {x['digest']}")
    ev["log10_chance_all_equal"] = round(power, 2)
    if ev["pairs"] == 0:
        return verdict(name, "skipped", "no two stages made a draw of equal size and probability at one position", **ev)
    if power > math.log10(CHANCE):
        return verdict(name, "skipped", f"the masks are too small to tell stages apart: equal masks on every pair would "
                                        f"happen by chance with probability 10^{power:.1f}", **ev)
    if ev["coincident"] and same_chance < math.log10(CHANCE):
        return verdict(name, "failed", f"{ev['coincident']} of {ev['pairs']} draws equal across stages (chance "
                                       f"10^{same_chance:.1f}; first: {first_same}): the stages draw one stream", **ev)
    return verdict(name, "passed", f"{ev['pairs']} draws at equal positions differ across {_pp(h)} stages", **ev)


def check_all(h: Dict[str, Any], frames: Dict[str, Any], case: Dict[str, Any],
              one: Optional[Tuple[Dict[str, Any], Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """Every check; the gradient check only with a one-rank run's (header, frames)."""
    out = [recompute_equal(h), tp_masks_differ(h, case), outside_masks_equal(h), pp_schedule_1f1b(h),
           pp_stage_masks_differ(h, case), dp_grads_reduced(h, frames, case)]
    if one is not None:
        out.append(grads_match_one_rank(h, frames, one[0], one[1], case))
    else:
        out.append(verdict("grads_match_one_rank", "skipped", "no one-rank run to compare with",
                           ranks=int(h.get("ranks", {}).get("world", 1)), tensors=0))
    return out
