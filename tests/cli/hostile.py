#!/usr/bin/env python3
"""The hostile-input set (issue 10): generated here, run against recap's readers and flags.

usage: hostile.py RECAP SRCDIR WORKDIR

Every input must give exit 0, 1 or 2; never a signal or a timeout; and an exit 2 exactly one line
on stderr of at most 300 bytes. Inputs: mutations of corpus files (numbers out of range, deep
nesting, size, duplicate keys, NUL bytes, truncation, bad UTF-8, newlines and huge strings in
echoed values, wrong types), paths that are not case files (a directory, devices, a fifo, a
missing file, a non-UTF-8 name, /proc/self/mem), and edge values of flags.
"""

import glob
import json
import os
import subprocess
import sys

recap, src, work = (os.path.abspath(a) for a in sys.argv[1:4])
os.makedirs(work, exist_ok=True)
os.chdir(work)

TIMEOUT = 60
problems = []
runs = 0


def run(args, what):
    global runs
    runs += 1
    try:
        p = subprocess.run([recap] + args, capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        problems.append(f"{what}: timed out after {TIMEOUT} s")
        return
    if p.returncode < 0:
        problems.append(f"{what}: killed by signal {-p.returncode}")
    elif p.returncode not in (0, 1, 2):
        problems.append(f"{what}: exit {p.returncode}")
    elif p.returncode == 2:
        err = p.stderr
        lines = err.count(b"\n")
        if lines != 1 or not err.endswith(b"\n") or len(err) > 301:
            problems.append(f"{what}: exit 2 with {lines} lines, {len(err)} bytes on stderr: {err[:200]!r}")


def write(name, data):
    with open(name, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return name


# ---- mutated case files ------------------------------------------------------------------------
bases = sorted(glob.glob(os.path.join(src, "corpus", "*.json")))[:4]
big = "x" * (2 << 20)
for bi, base in enumerate(bases):
    text = open(base).read()
    case = json.loads(text)
    muts = {}
    for field in ("lr", "hidden", "tokens", "warmup", "replays", "microbatches", "tp"):
        for v in ("1e400", "-1e400", "1e308", "18446744073709551616", "-1", "3.5", "true", '"7"', "null"):
            c = dict(case)
            c[field] = "@@"
            muts[f"{field}={v}"] = json.dumps(c).replace('"@@"', v)
    c = dict(case); c["layers"] = [dict(case["layers"][0], heads="@@")]
    muts["heads=1e400"] = json.dumps(c).replace('"@@"', "1e400")
    c = dict(case); c["seeds"] = {"param": "@@", "data": 1, "rng": 2}
    muts["seed=2^64"] = json.dumps(c).replace('"@@"', "18446744073709551616")
    muts["seed=-5"] = json.dumps(c).replace('"@@"', "-5")
    c = dict(case); c["expected"] = "@@"
    muts["depth-100"] = json.dumps(c).replace('"@@"', "[" * 100 + "]" * 100)
    muts["depth-50000"] = json.dumps(c).replace('"@@"', "[" * 50000 + "]" * 50000)
    muts["duplicate-key"] = text.rstrip().rstrip("}") + ', "lr": 0.5}'
    muts["nul"] = text + "\0garbage"
    muts["nul-inside"] = text[:40] + "\0" + text[40:]
    muts["truncated"] = text[: len(text) // 2]
    muts["empty"] = ""
    muts["not-an-object"] = "[1, 2, 3]"
    c = dict(case); c["name"] = "a\nb\rc\x1bd"
    muts["control-chars"] = json.dumps(c)
    c = dict(case); c["layers"] = [dict(case["layers"][0], kind="k\n" + "y" * 200000)]
    muts["long-kind-with-newline"] = json.dumps(c)
    c = dict(case); c["description"] = big
    muts["over-1MiB"] = json.dumps(c)
    c = dict(case); c["layers"] = case["layers"] * 100000
    muts["many-layers"] = json.dumps(c)
    c = dict(case); c["layers"] = case["layers"] * 65
    muts["65-layers"] = json.dumps(c)
    c = dict(case); c["microbatch_order"] = [1] * 5000 + [-1] * 5000
    muts["long-order"] = json.dumps(c)
    c = dict(case); c["faults"] = ["bogus\n"]
    muts["bad-fault"] = json.dumps(c)
    c = dict(case); c["sut"] = {"name": "jax", "version": "1"}
    muts["unknown-sut"] = json.dumps(c)
    muts["bad-utf8"] = text.encode().replace(b'"schema"', b'"sch\xff\xfeema"', 1)
    muts["utf16-bom"] = b"\xff\xfe" + text.encode("utf-16-le")
    for name, body in muts.items():
        path = write(f"b{bi}-{name.replace('=', '_')}.json", body)
        run(["replay", "--backend", "sim", path], f"replay {os.path.basename(base)} [{name}]")
    run(["run", "--backend", "sim", f"b{bi}-depth-50000.json"], "run [depth-50000]")
    run(["run", "--backend", "sim", f"b{bi}-lr_1e400.json"], "run [lr=1e400]")

# ---- paths that are not case files -------------------------------------------------------------
os.makedirs("a-directory", exist_ok=True)
fifo = "a-fifo"
if not os.path.exists(fifo):
    os.mkfifo(fifo)
odd = b"odd-\xff\xfe-name.json"
with open(odd, "wb") as f:
    f.write(open(bases[0], "rb").read())
paths = ["a-directory", "/dev/null", "/dev/zero", "/dev/full", fifo, "missing.json", "/proc/self/mem",
         odd.decode("utf-8", "surrogateescape"), "-", ""]
for p in paths:
    run(["replay", "--backend", "sim", p], f"replay path {p!r}")
    run(["run", "--backend", "sim", p], f"run path {p!r}")
    run(["compare", p], f"compare path {p!r}")
    run(["merge", p, "--report", "merged.json"], f"merge path {p!r}")
run(["gate", "--backend", "sim", "--corpus", "a-directory", "--cases", "1"], "gate on an empty folder")
run(["fuzz", "--backend", "sim", "--cases", "1", "--known-findings", "/dev/zero"], "known-findings /dev/zero")
run(["fuzz", "--backend", "sim", "--cases", "1", "--known-findings", fifo], "known-findings fifo")

# ---- output paths ------------------------------------------------------------------------------
good = bases[0]
for out in ("a-directory", "no/such/folder/r.json", odd.decode("utf-8", "surrogateescape") + ".report", "/dev/full"):
    run(["replay", "--backend", "sim", good, "--report", out], f"--report {out!r}")
    run(["run", "--backend", "sim", good, "--json", out], f"run --json {out!r}")

# ---- recap report: mutated trade-off and campaign reports, odd paths ----------------------------
tradeoff = json.load(open(os.path.join(src, "tests", "cli", "data", "tradeoff-small.json")))
rmuts = {}


def tmut(name, edit, raw=None):
    d = json.loads(json.dumps(tradeoff))
    if edit:
        edit(d)
    rmuts[name] = raw if raw is not None else json.dumps(d)


conf = lambda d: d["sizes"][0]["configurations"][1]  # noqa: E731
for v in ("1e400", "-1", "3.5", "true", '"7"', "null", "18446744073709551616", "[]", "{}"):
    for field, where in (("median", lambda d: conf(d)["step_ms"]), ("peak_allocated", lambda d: conf(d)["memory"]),
                         ("layers", lambda d: d["sizes"][0]), ("tflops", conf), ("matmul_bf16_tflops", lambda d: d["context"])):
        def edit(d, field=field, where=where):
            where(d)[field] = "@@"
        d = json.loads(json.dumps(tradeoff))
        edit(d)
        rmuts[f"{field}={v}"] = json.dumps(d).replace('"@@"', v)
tmut("p10-above-median", lambda d: conf(d)["step_ms"].update(p10=99.0))
tmut("no-samples", lambda d: conf(d)["step_ms"].update(samples=[]))
tmut("no-configurations", lambda d: d["sizes"][0].update(configurations=[]))
tmut("no-sizes", lambda d: d.update(sizes=[]))
tmut("unknown-verdict", lambda d: conf(d).update(verdict="fine\n"))
tmut("two-names", lambda d: conf(d).update(name=d["sizes"][0]["configurations"][0]["name"]))
tmut("control-chars", lambda d: conf(d).update(name="a\x1b[2J\nb\r", findings=[{"bucket": "\x07\x1b]0;t\x07"}]))
tmut("long-name", lambda d: conf(d).update(name="n" * 200000))
tmut("choice-not-string", lambda d: conf(d).update(choice={"style": 3}))
tmut("many-configurations", lambda d: d["sizes"][0].update(
    configurations=[dict(conf(d), name=f"c{i}") for i in range(3000)]))
tmut("schema-number", lambda d: d.update(schema=1))
tmut("schema-unknown", lambda d: d.update(schema="recap.tradeoff/2"))
tmut("no-schema", lambda d: d.pop("schema"))
text = json.dumps(tradeoff)
tmut("depth-50000", None, text.replace('"findings": []', '"findings": ' + "[" * 50000 + "]" * 50000, 1))
tmut("duplicate-key", None, text.rstrip().rstrip("}") + ', "sizes": []}')
tmut("nul", None, text[:50] + "\0" + text[50:])
tmut("truncated", None, text[: len(text) // 2])
tmut("not-an-object", None, "[1]")
campaign = {"schema": "recap.report/1", "context": {"command": "fuzz"}, "summary": {}, "cases": []}
for k, v in (("buckets", [1]), ("properties", {"x": "y"}), ("failures", "no"), ("coverage", {"requirements": [1, "a"]}),
             ("by_disposition", {"passed": "many"}), ("crashes", [{"a": 1}]), ("known_findings", {"buckets": {"b": 3}})):
    c = json.loads(json.dumps(campaign))
    c["summary"][k] = v
    rmuts[f"campaign-{k}"] = json.dumps(c)
rmuts["campaign-no-summary"] = json.dumps({"schema": "recap.report/1", "context": {}})
rmuts["campaign-cases-string"] = json.dumps(dict(campaign, cases="x", replays=[1, {"expected": 3}]))
for name, body in rmuts.items():
    path = write(f"report-{name.replace('=', '_')}.json", body)
    run(["report", path, "-o", "page.html", "--text"], f"report [{name}]")
for p in paths:
    run(["report", p], f"report path {p!r}")
for out in ("a-directory", "no/such/folder/r.html", "/dev/full"):
    run(["report", os.path.join(src, "tests", "cli", "data", "tradeoff-small.json"), "-o", out], f"report -o {out!r}")
# ---- recap tradeoff: sweep files that are not sweeps, and its flags -----------------------------
sweep = {"schema": "recap.tradeoff-sweep/1", "sizes": [{"name": "a", "layers": 1, "hidden": 8, "heads": 2, "seq": 4}],
         "executor": ["eager"], "checkpoint": ["none"]}
bad_sweeps = {
    "sweep-deep.json": '{"schema": "recap.tradeoff-sweep/1", "sizes": ' + "[" * 50000 + "]" * 50000 + "}",
    "sweep-huge-int.json": json.dumps(dict(sweep, sizes=[dict(sweep["sizes"][0], layers=10 ** 30)])),
    "sweep-float-layers.json": json.dumps(dict(sweep, sizes=[dict(sweep["sizes"][0], layers=1.5)])),
    "sweep-nan-dropout.json": json.dumps(dict(sweep, sizes=[dict(sweep["sizes"][0], dropout="nan")])),
    "sweep-big-dropout.json": json.dumps(dict(sweep, sizes=[dict(sweep["sizes"][0], dropout=1e400)])).replace("Infinity", "1e400"),
    "sweep-name-newline.json": json.dumps(dict(sweep, sizes=[dict(sweep["sizes"][0], name="a\nb")])),
    "sweep-two-names.json": json.dumps(dict(sweep, sizes=[sweep["sizes"][0], sweep["sizes"][0]])),
    "sweep-modules-empty.json": json.dumps(dict(sweep, selective_modules=[[]])),
    "sweep-long-key.json": json.dumps(dict(sweep, **{"k" * 100000: 1})),
    "sweep-duplicate-key.json": '{"schema": "recap.tradeoff-sweep/1", "sizes": [], "sizes": []}',
}
for name, text in bad_sweeps.items():
    run(["tradeoff", "--backend", "sim", "--sweep", write(name, text)], f"tradeoff --sweep [{name}]")
for p in paths:
    run(["tradeoff", "--backend", "sim", "--sweep", p], f"tradeoff --sweep path {p!r}")
for f in (["--steps", "1e400"], ["--steps", "19"], ["--fp64-budget", "nan"], ["--fp64-budget", "-1"], ["--seed", "-1"],
          ["--dropout", "nan"], ["--layers", "0"], ["--micro-batch", "100000"], ["--judged-replays", "0"],
          ["--warmup", "4"], ["--dtype", "fp8"], ["--sut", "jax"], ["--name", "a b"], ["--corpus-dir", "/dev/null/x"]):
    run(["tradeoff", "--backend", "sim"] + f, "tradeoff " + " ".join(f))

# ---- flags at their edges ----------------------------------------------------------------------
flags = [
    ["fuzz", "--seed", ""], ["fuzz", "--seed", " 5"], ["fuzz", "--seed", "-1"], ["fuzz", "--seed", "99999999999999999999999"],
    ["fuzz", "--time-budget", "nan"], ["fuzz", "--time-budget", "-1"], ["fuzz", "--time-budget", "inf"],
    ["fuzz", "--cases", "-1"], ["fuzz", "--cases", "0"], ["fuzz", "--cases", "1e400"], ["fuzz", "--jobs", "0"],
    ["fuzz", "--jobs", "100000"], ["fuzz", "--shard", "3/2"], ["fuzz", "--shard", "x"], ["fuzz", "--policy", "\n"],
    ["fuzz", "--fault", "x" * 100000], ["fuzz", "--shrink-limit", "-3"], ["fuzz", "--dims", "huge"],
    ["mutants", "--cases", "0"], ["mutants", "--seed", "abc"], ["replay"], ["run"], ["compare"], ["merge"], ["frobnicate"],
    ["fuzz", "--bogus"], ["fuzz", "--worker-env", "NOEQUALS"], ["fuzz", "--sut", "jax"], ["fuzz", "--sut", "torch@\n"],
]
for f in flags:
    args = f + (["--backend", "sim", "--cases", "1"] if f[0] in ("fuzz",) and "--cases" not in f else [])
    run(args, "flags " + " ".join(a[:40] for a in f))

print(f"{runs} runs, {len(problems)} problems")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
