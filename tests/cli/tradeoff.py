#!/usr/bin/env python3
"""tradeoff.py CHECK RECAP SRCDIR WORKDIR: the checks of `recap tradeoff` (tests/cli/CMakeLists.txt).

  sim          the sweep tests/cli/data/tradeoff-sweep-sim.json on recap's runtime (sim): a report
               valid against reports/schema/recap.tradeoff.schema.json with one entry per
               configuration of the sweep (names derived here, independently of recap), every
               verdict from the oracles with every property's check listed, step times of
               exactly --steps samples, and the memory figures recap's runtime must give from its
               exact ledger: graph-safe recompute keeps fewer activation bytes inside per-layer
               graphs than no checkpointing, skip (PR #3919) keeps exactly as many and says so as
               a finding, full-iteration graphs set no phase flag so skip and graph-safe keep the
               same; saved bytes and overhead are against the same executor without checkpoints.
  fault        a planted fault (--fault rng-offset-baked): the graphed configurations are not
               passed, carry their finding (bucket, corpus file that replays it), exit 1; with a
               --known-findings file that names the bucket the finding carries its id and exit 0.
  judge_size   --judge-budget (issue 19's compute-bound size): tests/cli/data/tradeoff-sweep-judge-size.json
               with --judge-budget 20000: the size past it is judged at the smaller size the rule gives
               (computed here from docs/DESIGN.md's rule), the same configuration, its report entry
               says so (judged_size, schema-valid), its `case` is that size's and `recap replay`
               reproduces the verdict, its figures are still measured at its own size; the size
               within the budget is judged at its own size with no note; the table and `recap
               report` show a note for the first size only; with a fault, the corpus files of the
               first size are its judged size's cases and replay.
  torch_cpu    --sut torch on the CPU (the drivers' venv): eager configurations measured with the
               host clock and no memory figures (null, said in a note), graphed ones skipped with
               the reason the worker's hello gives; schema-valid.
  judge_jobs   --judge-jobs: tests/cli/data/tradeoff-sweep-judge-jobs.json on torch (CPU) with a
               planted mutant (ckpt-param-grad-lost: one configuration incorrect, the others
               passed), once with --judge-jobs 1 and once with 3: the second judges every
               configuration first (its stderr says so, with 3 workers, each judged line before
               the first measured one), both list every configuration in plan order on stderr,
               and the two reports are equal but for timings (verdicts, reasons, findings, checks
               with their evidence, memory figures, judged cases), as are their tables' verdicts,
               summaries and corpus files. Memory figures are null on the CPU: equal as such.
No timing is asserted: only that times exist and are ordered (p10 <= median <= p90).
Exit 0 pass, 1 fail, 77 skipped (no jsonschema; torch_cpu: no torch).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHECK, RECAP, SRC, WORK = sys.argv[1], os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3]), os.path.abspath(sys.argv[4])
DATA = os.path.join(SRC, "tests", "cli", "data")
SCHEMA = os.path.join(SRC, "reports", "schema", "recap.tradeoff.schema.json")
PROPERTIES = ["capture_clean", "eager_vs_graphed", "recompute_on_off", "rng_ledger", "memory", "reference", "training",
              "hygiene"]
STEPS = 20

try:
    import jsonschema
except ImportError:
    print("no jsonschema for " + sys.executable + ": skipped")
    sys.exit(77)

os.makedirs(WORK, exist_ok=True)
os.chdir(WORK)


def fail(msg: str) -> None:
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond: bool, msg: str) -> None:
    if not cond:
        fail(msg)


def tradeoff(*args: str, env=None):
    p = subprocess.run([RECAP, "tradeoff", *args], capture_output=True, text=True, env=env)
    print(p.stdout[-6000:])
    print(p.stderr[-3000:], file=sys.stderr)
    return p


def load_valid(path: str) -> dict:
    with open(SCHEMA) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    with open(path) as f:
        report = json.load(f)
    jsonschema.validate(report, schema, cls=jsonschema.Draft202012Validator)
    print("report validates:", path)
    return report


def expected_names(sweep: dict, styles, policies, generators, tracker=False) -> list:
    """The configuration names of a sweep, by the rule docs/DESIGN.md gives (section 8)."""
    names = []
    for ck in sweep.get("checkpoint", ["none", "selective", "full"]):
        sets = [[]] if ck != "selective" else sweep.get("selective_modules", [["attn_core"]])
        for mods in sets:
            for ex in sweep.get("executor", ["eager", "per-layer", "full-iteration"]):
                label = ck + ("(" + "+".join(mods) + ")" if mods else "") + "/" + ex
                for st in (styles[:1] if ck == "none" else styles):
                    for po in (policies[:1] if ck == "none" else policies):
                        for g in generators:
                            n = label + ("" if ck == "none" else "/" + st + "/" + po)
                            names.append(n + "/" + g)
    return names


def configs_by_name(report: dict, size: int = 0) -> dict:
    return {c["name"]: c for c in report["sizes"][size]["configurations"]}


def common_checks(report: dict, sweep: dict) -> None:
    size = report["sizes"][0]
    want = sweep["sizes"][0]
    for k in ("name", "layers", "hidden", "heads", "seq", "microbatches"):
        check(size[k] == want[k], f"size {k}: {size[k]} != {want[k]}")
    check(size["flops_per_step"] > 0, "flops_per_step")
    check(report["context"]["timing"]["measured_steps"] == STEPS, "measured_steps")
    for c in size["configurations"]:
        if c["verdict"] == "skipped":
            check(c.get("reason"), f"{c['name']}: skipped without a reason")
            check(c["step_ms"] is None, f"{c['name']}: skipped but timed")
            continue
        names = [k["property"] for k in c["checks"]]
        check(names == PROPERTIES, f"{c['name']}: checks {names}, expected every property in order")
        for k in c["checks"]:
            check(k["disposition"] != "skipped" or k.get("reason"), f"{c['name']}: {k['property']} skipped without a reason")
            check(k["disposition"] != "passed" or k.get("evidence"), f"{c['name']}: {k['property']} passed without evidence")
        if c["verdict"] in ("passed", "incorrect"):
            t = c["step_ms"]
            check(t is not None and len(t["samples"]) == STEPS, f"{c['name']}: {STEPS} timed steps expected, got {t}")
            check(t["p10"] <= t["median"] <= t["p90"], f"{c['name']}: p10 <= median <= p90")
            check(c["tflops"] is not None and c["tflops"] > 0, f"{c['name']}: tflops")
        if c["verdict"] != "passed":
            check(c.get("reason"), f"{c['name']}: {c['verdict']} without a reason")
            check(c["findings"], f"{c['name']}: {c['verdict']} without a finding")


def run_sim() -> None:
    sweep_path = os.path.join(DATA, "tradeoff-sweep-sim.json")
    sweep = json.load(open(sweep_path))
    p = tradeoff("--sut", "recap", "--backend", "sim", "--sweep", sweep_path, "--report", "r.json", "--corpus-dir", "found")
    # skip, as Megatron's after PR #3919, checkpoints as naive outside the graph phases: with the
    # graph-safe generator its saved RNG states are live handles, and the recompute draws other masks
    # (docs/recompute-and-rng.md, class 3): every skip configuration fails, the others pass
    check(p.returncode == 1, f"exit {p.returncode}, expected 1 (skip's configurations fail)")
    r = load_valid("r.json")
    check(r["context"]["sut"]["name"] == "recap" and r["context"]["backend"] == "sim", "context names recap on sim")
    check(r["context"]["timing"]["clock"].startswith("host-clock"), "sim is timed by the host clock, and says so")
    check(r["context"]["matmul_bf16_tflops"] is None and r["context"].get("matmul_note"), "no matmul rate on sim, with why")
    names = expected_names(sweep, ["reentrant"], sweep["policy"], ["graph-safe"])
    got = [c["name"] for c in r["sizes"][0]["configurations"]]
    check(got == names, f"configurations {got}\nexpected {names}")
    common_checks(r, sweep)
    c = configs_by_name(r)
    for n, cfg in c.items():
        if cfg["choice"].get("recompute") == "skip":
            f = cfg["findings"][0]
            check(cfg["verdict"] == "incorrect" and f["bucket"].split("/")[0] in ("recompute_on_off", "eager_vs_graphed"),
                  f"{n}: skip with live RNG handles: {cfg['verdict']} {cfg['findings']}")
            check(os.path.isfile(f["corpus_file"]) and "id" not in f, f"{n}: corpus file {f}")
        else:
            check(cfg["verdict"] == "passed", f"{n}: {cfg['verdict']} ({cfg.get('reason')})")
        check(cfg["matmul_share"] is None, f"{n}: matmul_share without a matmul rate")
        mem = cfg["memory"]
        check(mem["peak_allocated"] > 0 and mem["peak_reserved"] >= mem["peak_allocated"], f"{n}: peaks {mem}")
        check(mem["device_used"] > 0, f"{n}: device_used")
        if cfg["executor"] == "eager":
            for k in ("graph_pool", "capture_peak", "activations_in_graphs"):
                check(mem[k] is None, f"{n}: {k} of an eager run must be null")
            check(cfg["capture_ms"] is None, f"{n}: capture_ms of an eager run")
        else:
            check(mem["graph_pool"] > 0 and mem["activations_in_graphs"] > 0, f"{n}: graph figures {mem}")
            check(cfg["capture_ms"] is not None and cfg["capture_ms"] >= 0, f"{n}: capture_ms")
        if cfg["checkpoint"] == "none":
            check(mem["saved_by_recompute"] is None and cfg["recompute_overhead"] is None, f"{n}: a baseline has no saving")
        else:
            check(mem["saved_by_recompute"] is not None and cfg["recompute_overhead"] is not None,
                  f"{n}: saved bytes and overhead against its baseline")
            check(cfg["baseline"] == f"none/{cfg['executor']}/graph-safe", f"{n}: baseline {cfg.get('baseline')}")
    none_pl = c["none/per-layer/graph-safe"]["memory"]["activations_in_graphs"]
    for ck in ("full", "selective(attn_core)"):
        gs = c[f"{ck}/per-layer/reentrant/graph-safe/graph-safe"]
        skip = c[f"{ck}/per-layer/reentrant/skip/graph-safe"]
        kept_gs, kept_skip = gs["memory"]["activations_in_graphs"], skip["memory"]["activations_in_graphs"]
        # recap's ledger: graph-safe recompute frees inside the graphs, PR #3919's skip keeps everything
        check(kept_gs < none_pl, f"{ck}: graph-safe keeps {kept_gs} B inside per-layer graphs, not fewer than none's {none_pl}")
        check(gs["memory"]["saved_by_recompute"] == none_pl - kept_gs, f"{ck}: graph-safe saved bytes")
        check(kept_skip == none_pl, f"{ck}: skip keeps {kept_skip} B inside per-layer graphs, none keeps {none_pl}")
        check(skip["memory"]["saved_by_recompute"] == 0, f"{ck}: skip saves nothing")
        lost = [f for f in skip["findings"] if f["bucket"] == "memory/incorrect///" and "corpus_file" not in f]
        check(lost and "recompute lost inside graphs" in lost[0]["reason"], f"{ck}: skip's lost saving as a finding: {skip['findings']}")
        check(not gs["findings"] and gs["verdict"] == "passed", f"{ck}: graph-safe has findings {gs['findings']}")
        # per layer: each graphed layer's forward graph keeps less under graph-safe than without checkpoints
        layers = gs["per_layer"]
        base_layers = c["none/per-layer/graph-safe"]["per_layer"]
        check(len(layers) == sweep["sizes"][0]["layers"] == len(base_layers), f"{ck}: per_layer {layers}")
        for a, b in zip(layers, base_layers):
            check(a["activations_in_graphs"] < b["activations_in_graphs"], f"{ck}: layer {a['layer']}: {a} vs {b}")
        # one graph of the whole step sets no phase flag (as Megatron's): skip recomputes there too,
        # keeping what graph-safe keeps but graph-safe's 16-byte RNG pair per checkpoint in flight
        fi_gs = c[f"{ck}/full-iteration/reentrant/graph-safe/graph-safe"]["memory"]["activations_in_graphs"]
        fi_skip = c[f"{ck}/full-iteration/reentrant/skip/graph-safe"]["memory"]["activations_in_graphs"]
        pairs = 16 * sweep["sizes"][0]["layers"]  # one checkpoint per layer, one microbatch in flight
        check(fi_gs - fi_skip == pairs, f"{ck}: full-iteration graph-safe {fi_gs} B vs skip {fi_skip} B (+{pairs} B of pairs)")
        fi_none = c["none/full-iteration/graph-safe"]["memory"]["activations_in_graphs"]
        check(fi_gs < fi_none, f"{ck}: full-iteration graph-safe {fi_gs} B vs none {fi_none} B")
    # eager: recompute frees the checkpointed activations of every layer between forward and backward
    eager_none = c["none/eager/graph-safe"]
    eager_full = c["full/eager/reentrant/graph-safe/graph-safe"]
    check(eager_full["memory"]["saved_by_recompute"] > 0, "full checkpointing saves activations eagerly")
    check(eager_full["memory"]["activations_eager"] < eager_none["memory"]["activations_eager"], "eager activations")
    # the table on the terminal: a row per configuration
    for n in names:
        check(n in p.stdout, f"the table has no row {n}")
    written = sorted(os.listdir("found"))
    want = sorted(os.path.basename(cfg["findings"][0]["corpus_file"]) for cfg in c.values() if cfg["verdict"] != "passed")
    check(written == want, f"corpus files {written}, expected one per failing configuration {want}")
    rp = subprocess.run([RECAP, "replay", os.path.join("found", written[0])], capture_output=True, text=True)
    check(rp.returncode == 0, f"recap replay {written[0]}: exit {rp.returncode}\n{rp.stdout[-2000:]}")
    print(f"ok: {len(names)} configurations")


def run_fault() -> None:
    sweep_path = os.path.join(DATA, "tradeoff-sweep-fault.json")
    sweep = json.load(open(sweep_path))
    p = tradeoff("--backend", "sim", "--sweep", sweep_path, "--fault", "rng-offset-baked", "--report", "f.json",
                 "--corpus-dir", "found")
    check(p.returncode == 1, f"exit {p.returncode}, expected 1 (a new failure)")
    r = load_valid("f.json")
    common_checks(r, sweep)
    c = configs_by_name(r)
    check(r["context"]["faults"] == ["rng-offset-baked"], "the report names the fault")
    bad = [n for n, cfg in c.items() if cfg["verdict"] != "passed"]
    check(bad, "the fault makes no configuration fail")
    for n in bad:
        f = c[n]["findings"][0]
        check(f["bucket"].count("/") == 4 and not f.get("id"), f"{n}: finding {f}")
        check(os.path.isfile(f["corpus_file"]), f"{n}: corpus file {f.get('corpus_file')}")
        case = json.load(open(f["corpus_file"]))
        check(case["faults"] == ["rng-offset-baked"] and case["expected"]["disposition"] == c[n]["verdict"],
              f"{n}: the corpus file carries the fault and the verdict")
        rp = subprocess.run([RECAP, "replay", f["corpus_file"]], capture_output=True, text=True)
        check(rp.returncode == 0, f"{n}: recap replay {f['corpus_file']}: exit {rp.returncode}\n{rp.stdout[-2000:]}")
        check(c[n]["reason"].split(":")[0] == f["bucket"].split("/")[0], f"{n}: reason {c[n]['reason']} vs bucket")
    # the same failures, known: accepted by bucket and configuration, shown with the finding's id
    buckets = sorted({c[n]["findings"][0]["bucket"] for n in bad})
    known = {"schema": "recap.known-findings/1", "sut": {"name": "recap", "version": "0.1.0"},
             "description": "tests/cli/tradeoff.py: the planted fault's buckets",
             "findings": [{"id": "T1", "summary": "rng-offset-baked inside per-layer graphs", "buckets": buckets,
                           "when": {"executor": ["per-layer"]}}]}
    with open("known.json", "w") as f:
        json.dump(known, f)
    p = tradeoff("--backend", "sim", "--sweep", sweep_path, "--fault", "rng-offset-baked", "--report", "k.json",
                 "--corpus-dir", "found2", "--known-findings", "known.json")
    check(p.returncode == 0, f"with --known-findings: exit {p.returncode}, expected 0")
    k = configs_by_name(load_valid("k.json"))
    for n in bad:
        f = k[n]["findings"][0]
        check(k[n]["verdict"] == c[n]["verdict"] and f.get("id") == "T1" and "corpus_file" not in f, f"{n}: known finding {f}")
    check(not os.path.exists("found2") or not os.listdir("found2"), "a known finding writes no corpus file")
    print(f"ok: {len(bad)} configurations failed with their finding")


def need_torch() -> None:
    """Skips (77) where the drivers' Python has no torch, fails under RECAP_REQUIRE_TORCH."""
    py = os.environ.get("RECAP_PYTHON", "python3")
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0:
        if os.environ.get("RECAP_REQUIRE_TORCH"):
            fail(f"RECAP_REQUIRE_TORCH is set but {py} cannot import torch")
        print(f"no torch for {py}: skipped")
        sys.exit(77)


def run_torch_cpu() -> None:
    need_torch()
    sweep_path = os.path.join(DATA, "tradeoff-sweep-cpu.json")
    sweep = json.load(open(sweep_path))
    p = tradeoff("--sut", "torch", "--backend", "sim", "--sweep", sweep_path, "--report", "t.json", "--corpus-dir", "found")
    check(p.returncode in (0, 1), f"exit {p.returncode}")
    r = load_valid("t.json")
    check(r["context"]["sut"]["name"] == "torch" and r["context"]["sut"]["device"] == "cpu", "context names torch on cpu")
    check(r["context"]["timing"]["clock"].startswith("host-clock"), "the CPU is timed by the host clock, and says so")
    check(r["context"]["matmul_bf16_tflops"] is None, "no matmul rate on the CPU")
    names = expected_names(sweep, ["reentrant", "non-reentrant"], ["naive"], ["graph-safe"])
    got = [c["name"] for c in r["sizes"][0]["configurations"]]
    check(got == names, f"configurations {got}\nexpected {names}")
    common_checks(r, sweep)
    for n, cfg in configs_by_name(r).items():
        if cfg["executor"] == "per-layer":
            check(cfg["verdict"] == "skipped" and "executor per-layer" in cfg["reason"], f"{n}: {cfg['verdict']} {cfg.get('reason')}")
            continue
        check(cfg["verdict"] == "passed", f"{n}: {cfg['verdict']} ({cfg.get('reason')})")
        check(all(v is None for v in cfg["memory"].values()), f"{n}: memory on the CPU must be null: {cfg['memory']}")
        check("CPU" in cfg.get("note", ""), f"{n}: the note says why memory is null")
        # where the measure request's time went, as the worker timed it: its phases within it
        t = cfg.get("measure_timings", {})
        phases = {k: v for k, v in t.items() if k != "request_ms"}
        check(set(phases) == {"data_ms", "model_build_ms", "run_ms", "cleanup_ms"}, f"{n}: measure_timings {t}")
        check(sum(phases.values()) <= t["request_ms"], f"{n}: phases over the request's time: {t}")
    print(f"ok: {len(names)} configurations on torch (CPU)")


TIMING = {"step_ms", "tflops", "matmul_share", "recompute_overhead", "capture_ms", "partial_step_ms", "forward_ms",
          "backward_ms", "measure_timings"}


def without_timings(x):
    """The report's content less what a clock measured (and corpus files' folder)."""
    if isinstance(x, dict):
        return {k: (os.path.basename(v) if k == "corpus_file" else without_timings(v)) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [without_timings(v) for v in x]
    return x


def run_judge_jobs() -> None:
    need_torch()
    sweep_path = os.path.join(DATA, "tradeoff-sweep-judge-jobs.json")
    runs = {}
    for jobs in (1, 3):
        p = tradeoff("--sut", "torch", "--backend", "sim", "--sweep", sweep_path, "--judge-jobs", str(jobs),
                     "--worker-env", "RECAP_FRAMEWORK_MUTANT=ckpt-param-grad-lost",
                     "--report", f"j{jobs}.json", "--corpus-dir", f"found{jobs}")
        check(p.returncode == 1, f"--judge-jobs {jobs}: exit {p.returncode}, expected 1 (the mutant's new failure)")
        runs[jobs] = (p, load_valid(f"j{jobs}.json"))
    (p1, r1), (p3, r3) = runs[1], runs[3]
    names = [c["name"] for c in r1["sizes"][0]["configurations"]]
    verdicts = [c["verdict"] for c in r1["sizes"][0]["configurations"]]
    # a mix, so that a verdict or finding landing on the wrong configuration shows
    check(verdicts.count("skipped") == 5 and verdicts.count("passed") >= 3 and
          any(v not in ("passed", "skipped") for v in verdicts), f"verdicts {verdicts}")
    # stderr: one line per configuration in plan order, each after every judged line with 3 jobs
    for jobs, p in ((1, p1), (3, p3)):
        lines = p.stderr.splitlines()
        done = [l for l in lines if l.startswith("tradeoff: [")]
        check(len(done) == len(names) and all(f"[{i + 1}/{len(names)}] tiny {n}: " in l for i, (n, l) in enumerate(zip(names, done))),
              f"--judge-jobs {jobs}: progress lines {done}")
        judged = [i for i, l in enumerate(lines) if l.startswith("tradeoff: judged [")]
        if jobs == 1:
            check(not judged, f"--judge-jobs 1 judges as it measures: {lines}")
        else:
            check("tradeoff: judging 5 configurations with 3 torch workers, then measuring them one at a time" in lines,
                  f"--judge-jobs 3: no judging line: {lines}")
            check(len(judged) == 5 and max(judged) < lines.index(done[0]), f"--judge-jobs 3: judged lines {lines}")
    # the reports: equal but for timings, configuration by configuration
    check(without_timings(r1["sizes"]) == without_timings(r3["sizes"]) and len(r1["sizes"]) == len(r3["sizes"]) == 1,
          "the reports' sizes differ")
    for c1, c3 in zip(r1["sizes"][0]["configurations"], r3["sizes"][0]["configurations"]):
        a, b = without_timings(c1), without_timings(c3)
        check(a == b, f"{c1['name']}: --judge-jobs 1 and 3 differ:\n{json.dumps(a, sort_keys=True)}\n{json.dumps(b, sort_keys=True)}")
    bad = [c for c in r1["sizes"][0]["configurations"] if c["findings"]]
    check(bad and all(os.path.isfile(f["corpus_file"]) for c in bad for f in c["findings"] if "corpus_file" in f), "findings")
    check(sorted(os.listdir("found1")) == sorted(os.listdir("found3")) and os.listdir("found1"), "corpus files")
    for f in os.listdir("found1"):
        check(json.load(open(os.path.join("found1", f))) == json.load(open(os.path.join("found3", f))), f"corpus file {f}")
    # the tables: each configuration's verdict, and the summary line
    def table(out):
        rows = {}
        for l in out.splitlines():
            w = l.split()
            if len(w) > 1 and w[0] in names:
                rows[w[0]] = w[1]
        return rows, [l for l in out.splitlines() if " configurations: " in l]
    check(table(p1.stdout) == table(p3.stdout) and len(table(p1.stdout)[0]) == len(names), "the tables' verdicts")
    print(f"ok: {len(names)} configurations, the same with --judge-jobs 1 and 3")


def observed(layers, hidden, heads, ffn, tokens, microbatches, dropout) -> int:
    """Elements the judged case observes a step (docs/DESIGN.md, section 8): parameters x
    (microbatches + 2), and with dropout one forward's masks."""
    block = 4 * hidden * hidden + 2 * hidden * ffn + 9 * hidden + ffn  # ln1, qkv, proj, ln2, fc1, fc2 with biases
    masks = microbatches * layers * tokens * (heads * tokens + 2 * hidden) if dropout > 0 else 0
    return layers * block * (microbatches + 2) + masks


def judged_dims(size: dict, budget: float):
    """The judged size's (hidden, heads, ffn, tokens) by the rule, or None (judged at its own size)."""
    tokens = size["seq"] * size.get("micro_batch", 1)
    ffn0 = size.get("ffn_hidden", 0)
    ffn_of = lambda h: (round(ffn0 * h / size["hidden"]) or 1) if ffn0 else 4 * h
    fig = lambda h, hd, t: observed(size["layers"], h, hd, ffn_of(h), t, size["microbatches"], size["dropout"])
    if fig(size["hidden"], size["heads"], tokens) <= budget:
        return None
    heads_of = lambda h: max(d for d in range(1, min(size["heads"], 4) + 1) if h % d == 0)
    fh, ft = min(size["hidden"], 8), min(tokens, 8)
    h, t = min(size["hidden"], 256), min(tokens, 256)
    while fig(h, heads_of(h), t) > budget and (h > fh or t > ft):
        h, t = max(fh, h // 2), max(ft, t // 2)
    return h, heads_of(h), ffn_of(h), t


def run_judge_size() -> None:
    sweep_path = os.path.join(DATA, "tradeoff-sweep-judge-size.json")
    sweep = json.load(open(sweep_path))
    budget = 20000
    p = tradeoff("--sut", "recap", "--backend", "sim", "--sweep", sweep_path, "--judge-budget", str(budget),
                 "--judged-replays", "2", "--report", "j.json", "--corpus-dir", "found")
    check(p.returncode == 0, f"exit {p.returncode}, expected 0 (graph-safe configurations pass)")
    r = load_valid("j.json")
    check(r["context"]["oracles"]["judge_budget"] == budget, "the context names --judge-budget")
    wide, narrow = r["sizes"]
    sw, sn = sweep["sizes"]
    full = observed(sw["layers"], sw["hidden"], sw["heads"], sw["ffn_hidden"], sw["seq"] * sw["micro_batch"],
                    sw["microbatches"], sw["dropout"])
    check(full > budget and wide["observed_per_step"] == full, f"wide observes {wide.get('observed_per_step')}, expected {full}")
    dims = judged_dims(sw, budget)
    check(dims is not None and dims != (sw["hidden"], sw["heads"], sw["ffn_hidden"], sw["seq"] * sw["micro_batch"]),
          f"the rule must shrink wide: {dims}")
    h, heads, ffn, tokens = dims
    check(observed(sw["layers"], h, heads, ffn, tokens, sw["microbatches"], sw["dropout"]) <= budget, "judged size within")
    check(judged_dims(sn, budget) is None and narrow["observed_per_step"] <= budget, "narrow is within the budget")
    # the size entry stays the full size: what was measured
    check(wide["hidden"] == sw["hidden"] and wide["heads"] == sw["heads"] and wide["tokens"] == sw["seq"] * sw["micro_batch"],
          f"wide's size entry must be its own size: {wide['hidden']}, {wide['heads']}, {wide['tokens']}")
    for c in wide["configurations"]:
        n = c["name"]
        js = c.get("judged_size")
        check(js is not None, f"wide {n}: no judged_size")
        check((js["hidden"], js["heads"], js["ffn_hidden"], js["tokens"]) == dims, f"wide {n}: judged_size {js}, expected {dims}")
        check(f"{full} elements a step, over --judge-budget {budget}" in js["reason"], f"wide {n}: reason {js['reason']}")
        case = c["case"]
        check(case["hidden"] == h and case["tokens"] == tokens, f"wide {n}: judged case hidden {case['hidden']} tokens {case['tokens']}")
        check(len(case["layers"]) == sw["layers"], f"wide {n}: judged case has {len(case['layers'])} layers")
        for l in case["layers"]:
            check(l["heads"] == heads and l["ffn_hidden"] == ffn and abs(l["dropout"] - sw["dropout"]) < 1e-6,
                  f"wide {n}: judged layer {l}")
            want_ck = "none" if c["checkpoint"] == "none" else c["checkpoint"]
            check(l.get("checkpoint", "none") == want_ck, f"wide {n}: judged layer checkpoint {l.get('checkpoint')}")
        check(case["microbatches"] == sw["microbatches"] and case["executor"] == c["executor"] and case["replays"] == 2,
              f"wide {n}: judged case microbatches/executor/replays {case['microbatches']} {case['executor']} {case['replays']}")
        check(c["verdict"] == "passed" and len(c["step_ms"]["samples"]) == STEPS, f"wide {n}: {c['verdict']}, measured")
        # recap replay reproduces the verdict from the case the report holds
        case = dict(case)
        case["expected"] = {"disposition": c["verdict"]}
        path = "wide-" + n.replace("/", "_") + ".json"
        json.dump(case, open(path, "w"))
        rp = subprocess.run([RECAP, "replay", path], capture_output=True, text=True)
        check(rp.returncode == 0, f"wide {n}: recap replay {path}: exit {rp.returncode}\n{rp.stdout[-2000:]}{rp.stderr[-1000:]}")
    for c in narrow["configurations"]:
        check("judged_size" not in c, f"narrow {c['name']}: judged_size {c.get('judged_size')} within the budget")
        check(c["case"]["hidden"] == sn["hidden"] and c["case"]["tokens"] == sn["seq"], f"narrow {c['name']}: judged case")
    note = f"judged at hidden {h}, {heads} heads, ffn {ffn}, {tokens} tokens, not at this size"
    lines = [l for l in p.stdout.splitlines() if "judged size:" in l]
    check(len(lines) == 1 and note in lines[0] and "2 of 2 configurations" in lines[0], f"the table's note: {lines}")
    check(p.stdout.index(lines[0]) < p.stdout.index("size narrow"), "the note is under wide's table")
    rt = subprocess.run([RECAP, "report", "j.json"], capture_output=True, text=True)
    check(rt.returncode == 0, f"recap report: exit {rt.returncode}\n{rt.stderr[-2000:]}")
    lines = [l for l in rt.stdout.splitlines() if "judged size:" in l]
    check(len(lines) == 1 and note in lines[0], f"recap report's note: {lines}")
    check(rt.stdout.index(lines[0]) < rt.stdout.index("narrow:"), "recap report's note is under wide")
    rh = subprocess.run([RECAP, "report", "j.json", "-o", "j.html"], capture_output=True, text=True)
    if rh.returncode == 0:  # the page needs plotly.js; the text above is the same content
        page = open("j.html").read()
        check(page.count('class="note judged-size"') == 1 and note in page, "the page's note")
    # a failure found at the judged size: its corpus file is that size's case, and replays
    p = tradeoff("--backend", "sim", "--sweep", sweep_path, "--judge-budget", str(budget), "--fault", "rng-offset-baked",
                 "--report", "f.json", "--corpus-dir", "found-fault")
    check(p.returncode == 1, f"with a fault: exit {p.returncode}, expected 1")
    for c in load_valid("f.json")["sizes"][0]["configurations"]:
        check(c["verdict"] != "passed" and c.get("judged_size"), f"wide {c['name']} with a fault: {c['verdict']}")
        f = c["findings"][0]["corpus_file"]
        case = json.load(open(f))
        check(case["hidden"] == h and case["tokens"] == tokens and case["layers"][0]["heads"] == heads,
              f"wide {c['name']}: corpus file {f} at hidden {case['hidden']}, {case['tokens']} tokens")
        check(f"judged at hidden {h}, {tokens} tokens" in case.get("description", ""), f"{f}: description {case.get('description')}")
        rp = subprocess.run([RECAP, "replay", f], capture_output=True, text=True)
        check(rp.returncode == 0, f"wide {c['name']}: recap replay {f}: exit {rp.returncode}\n{rp.stdout[-2000:]}")
    print(f"ok: wide judged at {dims}, narrow at its own size")


def run_interrupt() -> None:
    """SIGTERM after the first configuration's line (as `timeout` sends it): recap finishes that one,
    starts no other, writes a schema-valid report with every configuration (those not reached
    skipped, "not run: ..."), says so, and exits 143."""
    import signal

    sweep_path = os.path.join(DATA, "tradeoff-sweep-sim.json")
    p = subprocess.Popen([RECAP, "tradeoff", "--backend", "sim", "--sweep", sweep_path, "--report", "i.json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    assert p.stderr is not None
    for line in p.stderr:
        seen.append(line)
        if line.startswith("tradeoff: [1/"):
            p.send_signal(signal.SIGTERM)
            break
    err = "".join(seen) + p.stderr.read()
    out = p.stdout.read() if p.stdout else ""
    rc = p.wait()
    print(out[-3000:])
    print(err[-3000:], file=sys.stderr)
    check(rc == 143, f"exit {rc}, expected 143")
    check("interrupted (Terminated): the configurations that ran" in out, "no interrupted line")
    r = load_valid("i.json")
    check(r["context"].get("interrupted") == "Terminated", f"context.interrupted: {r['context'].get('interrupted')}")
    configs = r["sizes"][0]["configurations"]
    sweep = json.load(open(sweep_path))
    names = expected_names(sweep, ["reentrant"], sweep["policy"], ["graph-safe"])  # as run_sim
    check([c["name"] for c in configs] == names, f"every configuration listed: {[c['name'] for c in configs]}")
    not_run = [c for c in configs if c.get("reason", "").startswith("not run: recap tradeoff was interrupted (Terminated)")]
    ran = [c for c in configs if c["verdict"] != "skipped"]
    check(ran and ran[0] is configs[0] and ran[0]["step_ms"] is not None, "the first configuration ran and was timed")
    check(len(not_run) >= len(configs) - 2, f"{len(not_run)} of {len(configs)} configurations not run")
    check(all(c["verdict"] == "skipped" and c["step_ms"] is None for c in not_run), "a configuration not run has figures")
    print(f"ok: {len(ran)} ran, {len(not_run)} not run of {len(configs)}")


{"sim": run_sim, "fault": run_fault, "judge_size": run_judge_size, "torch_cpu": run_torch_cpu,
 "judge_jobs": run_judge_jobs, "interrupt": run_interrupt}[CHECK]()
