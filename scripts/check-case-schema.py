#!/usr/bin/env python3
"""check-case-schema.py RECAP SRCDIR WORKDIR [all|files|probes|fuzz]

The JSON Schema of recap.case/1 (reports/schema/recap.case.schema.json), recap's reader
(harness/training/spec.cpp, read_case_file) and the Python reader (recap_drivers.case) must agree:
  files   every case file in the repository (each tracked *.json whose "schema" is recap.case/1,
          but the malformed ones of tests/cli/data) validates, loads in recap and in Python;
  probes  malformed cases (the CLI tests' bad files, and one probe per key, enum value, range end
          and cross-field rule) are rejected by all three; valid edge cases are accepted by all
          three; every enum of the schema is the C++ table's, value for value;
  fuzz    the counterexample files `recap fuzz` writes (with a fault point) validate and load.
"Loads in recap" is `recap replay FILE SENTINEL`: replay reads every file before it runs any
(harness/cli/replay_cmd.cpp), so with a sentinel that never loads it only reads FILE: exit 2
naming FILE is a rejection, exit 2 naming the sentinel an acceptance. Exit 0 all agree, 1 they
do not, 77 no jsonschema (a failure when RECAP_REQUIRE_TORCH is set, as for the driver tests).
"""

from __future__ import annotations

import copy
import glob
import json
import os
import re
import subprocess
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

try:
    import jsonschema
except ImportError:
    print("no jsonschema in " + sys.executable + ": cannot check the case schema")
    sys.exit(1 if os.environ.get("RECAP_REQUIRE_TORCH") else 77)

if len(sys.argv) < 4:
    sys.exit(__doc__)
RECAP, SRC, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
PART = sys.argv[4] if len(sys.argv) > 4 else "all"
os.makedirs(WORK, exist_ok=True)
sys.path.insert(0, os.path.join(SRC, "drivers"))
from recap_drivers.case import CaseError, parse_case  # noqa: E402

SCHEMA = json.load(open(os.path.join(SRC, "reports/schema/recap.case.schema.json")))
jsonschema.Draft202012Validator.check_schema(SCHEMA)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
SENTINEL = os.path.join(WORK, "sentinel.json")
with open(SENTINEL, "w") as f:
    f.write("{}")  # layers missing: never loads

# The CLI tests' bad case files (tests/cli/CMakeLists.txt): recap exits 2 on each.
CLI_BAD = ["absurd_dims", "malformed", "negative_dims", "truncated", "unknown-fault", "unknown_kind", "unknown_sut"]
# Where the Python reader knowingly reads more than recap (none today): names a maintainer must remove when the
# reader starts rejecting them (the check then fails).
PY_LENIENT: Dict[str, str] = {}

failures: List[str] = []


def fail(msg: str) -> None:
    failures.append(msg)
    print("FAIL " + msg)


# ---- the three readers: each returns "" (accepted) or why not ---------------------------------


def schema_verdict(text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError as e:
        return "not JSON: " + str(e)
    errs = sorted(VALIDATOR.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return "; ".join(f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"[:200] for e in errs[:3])


def recap_verdict(text: str) -> str:
    path = os.path.join(WORK, "probe.json")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run([RECAP, "replay", "--backend", "sim", "probe.json", SENTINEL], cwd=WORK,
                       capture_output=True, text=True, timeout=60)
    err = r.stderr.strip()
    if r.returncode != 2 or "\n" in err:
        return f"!unexpected: exit {r.returncode}, stderr {err!r}"  # neither verdict: fails every comparison
    if "sentinel.json" in err:
        return ""
    if not err.startswith("recap: error: probe.json"):
        return f"!unexpected: {err!r}"
    return err


def python_verdict(text: str) -> str:
    try:
        doc = json.loads(text)
    except ValueError as e:
        return "not JSON: " + str(e)
    if isinstance(doc, dict):
        doc.pop("sut", None)  # a property of the file, which recap strips before it sends a case
    try:
        parse_case(doc)
    except CaseError as e:
        return str(e) or "CaseError"
    except Exception as e:  # noqa: BLE001 -- any other exception is a reader bug, not a rejection
        return f"!unexpected: {type(e).__name__}: {e}"
    return ""


def check(name: str, text: str, valid: bool, python: bool = True) -> None:
    """All readers agree that `text` is (valid) or is not a case; python=False: the probe is about
    the file's "sut", which the Python reader never sees."""
    verdicts = {"schema": schema_verdict(text), "recap": recap_verdict(text)}
    if python:
        verdicts["python"] = python_verdict(text)
    for reader, why in verdicts.items():
        accepted = why == ""
        if why.startswith("!unexpected"):
            fail(f"{name}: {reader}: {why}")
        elif reader == "python" and name in PY_LENIENT:
            if not accepted:
                fail(f"{name}: the Python reader now rejects it ({why}): remove it from PY_LENIENT")
        elif accepted != valid:
            fail(f"{name}: {reader} {'rejects' if not accepted else 'accepts'} it, expected "
                 f"{'valid' if valid else 'invalid'}{': ' + why if why else ''}")


# ---- files ------------------------------------------------------------------------------------


def case_files() -> List[str]:
    """Every tracked *.json whose top-level schema is recap.case/1 (every *.json under SRC outside
    build folders where there is no git)."""
    try:
        out = subprocess.run(["git", "-C", SRC, "ls-files", "*.json"], capture_output=True, text=True, check=True).stdout
        paths = out.split()
    except (OSError, subprocess.CalledProcessError):
        paths = [os.path.relpath(p, SRC) for p in glob.glob(os.path.join(SRC, "**/*.json"), recursive=True)
                 if not re.search(r"/(build[^/]*|\.venv[^/]*)/", p)]
    found = []
    for p in sorted(paths):
        with open(os.path.join(SRC, p), "rb") as f:
            head = f.read()
        if b'"recap.case/1"' not in head:
            continue
        try:
            doc = json.loads(head)
        except ValueError:
            doc = None
        if (isinstance(doc, dict) and doc.get("schema") == "recap.case/1") or doc is None:
            found.append(p)
    return found


def check_files() -> None:
    bad = {f"tests/cli/data/{n}.json" for n in CLI_BAD}
    files = case_files()
    missing = bad - set(files)
    if missing:
        fail(f"the CLI's bad case files are gone: {sorted(missing)} (update CLI_BAD)")
    valid = [p for p in files if p not in bad]
    if len(valid) < 50:
        fail(f"only {len(valid)} case files found under {SRC}: the search is broken")
    for p in valid:
        check(p, open(os.path.join(SRC, p)).read(), True)
    for p in sorted(bad & set(files)):
        name = "cli data " + os.path.basename(p)[:-5]
        check(name, open(os.path.join(SRC, p)).read(), False, python="unknown_sut" not in p)
    print(f"files: {len(valid)} valid case files, {len(bad & set(files))} bad ones")


def check_fuzz() -> None:
    """Two campaigns of scripts/report-baseline.sh's seed, shorter: with a fault point, and naive."""
    n = 0
    for name, flags in (("fault", ["--cases", "60", "--fault", "static-input-stale", "--policy", "graph-safe"]),
                        ("naive", ["--cases", "100", "--policy", "naive"])):
        out = os.path.join(WORK, "fuzz-corpus-" + name)
        r = subprocess.run([RECAP, "fuzz", "--backend", "sim", "--seed", "7", "--corpus-dir", out] + flags, cwd=WORK,
                           capture_output=True, text=True, timeout=600)
        written = sorted(glob.glob(os.path.join(out, "*.json")))
        if r.returncode not in (0, 1) or not written:
            fail(f"recap fuzz ({name}) wrote {len(written)} case files (exit {r.returncode}): {r.stderr[-300:]}")
        for p in written:
            check(f"recap fuzz ({name}) wrote {os.path.basename(p)}", open(p).read(), True)
        n += len(written)
    print(f"fuzz: {n} files written by recap fuzz")


# ---- probes -----------------------------------------------------------------------------------

BASE: Dict[str, Any] = {
    "schema": "recap.case/1", "name": "probe", "hidden": 16, "tokens": 8, "dtype": "fp32",
    "layers": [{"kind": "block", "heads": 2, "ffn_hidden": 32, "dropout": 0.1, "checkpoint": "full", "graphed": True},
               {"kind": "linear", "checkpoint": "none"}],
    "checkpoint_style": "reentrant", "policy": "graph-safe", "executor": "per-layer", "warmup": 1, "replays": 2,
    "microbatches": 2, "microbatch_order": [1, 1, -1, -1], "generator": "graph-safe", "device_state": "shared",
    "warmup_backward": "backward", "shared_pool": True, "seeds": {"param": 1, "data": 2, "rng": 3}, "lr": 0.05,
    "expected": {"disposition": "passed"},
}


def with_(path: str, value: Any) -> Callable[[Dict[str, Any]], None]:
    """Sets (or, for value DEL, deletes) the key at a dotted path: "layers.0.kind"."""
    def edit(c: Dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = c
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        key: Any = int(last) if isinstance(node, list) else last
        if value is DEL:
            del node[key]
        else:
            node[key] = value
    return edit


DEL = object()
U64_MAX = 2**64 - 1
SEL = "layers.0.checkpoint"

# (name, valid, edits, python applies)
PROBES: List[Tuple[str, bool, List[Callable[[Dict[str, Any]], None]], bool]] = [
    ("base", True, [], True),
    ("minimal: layers only", True, [lambda c: [c.pop(k) for k in list(c) if k != "layers"]], True),
    ("comments at every level", True, [with_("_note", 1), with_("layers.0._x", [1]), with_("seeds._y", None),
                                       with_("sut", {"name": "torch", "_z": 0})], True),
    ("schema: wrong string", False, [with_("schema", "recap.case/2")], True),
    ("schema: not a string", False, [with_("schema", 1)], True),
    ("unknown key", False, [with_("layer", [])], True),
    ("unknown layer key", False, [with_("layers.0.kinds", "block")], True),
    ("unknown seeds key", False, [with_("seeds.seed", 1)], True),
    ("unknown sut key", False, [with_("sut", {"name": "torch", "vers": "2"})], False),
    ("empty object", False, [lambda c: c.clear()], True),
    ("layers: missing", False, [with_("layers", DEL)], True),
    ("layers: empty", False, [with_("layers", [])], True),
    ("layers: not an array", False, [with_("layers", {})], True),
    ("layers: 64", True, [with_("layers", [{"kind": "gelu"}] * 64)], True),
    ("layers: 65", False, [with_("layers", [{"kind": "gelu"}] * 65)], True),
    ("layer: kind missing", False, [with_("layers.1.kind", DEL)], True),
    ("layer: not an object", False, [with_("layers.1", "linear")], True),
    ("hidden: a string", False, [with_("hidden", "16")], True),
    ("tokens: 1e9", False, [with_("tokens", 1000000000)], True),
    ("tokens: int64 max + 1", False, [with_("tokens", 2**63)], True),
    ("dropout: 0", True, [with_("layers.0.dropout", 0)], True),
    ("dropout: 0.99", True, [with_("layers.0.dropout", 0.99)], True),
    ("dropout: 1", False, [with_("layers.0.dropout", 1.0)], True),
    ("dropout: -0.1", False, [with_("layers.0.dropout", -0.1)], True),
    ("dropout: a string", False, [with_("layers.0.dropout", "0.1")], True),
    ("graphed: a string", False, [with_("layers.0.graphed", "yes")], True),
    ("checkpoint: true", True, [with_(SEL, True)], True),
    ("checkpoint: false", True, [with_(SEL, False)], True),
    ("checkpoint: a number", False, [with_(SEL, 1)], True),
    ("selective: block, two modules", True, [with_(SEL, "selective"), with_("layers.0.checkpoint_modules", ["attn_core", "mlp"])], True),
    ("selective: attention, attn_core", True, [with_("layers.0.kind", "attention"), with_(SEL, "selective"),
                                                with_("layers.0.checkpoint_modules", ["attn_core"])], True),
    ("selective: attention, mlp", False, [with_("layers.0.kind", "attention"), with_(SEL, "selective"),
                                          with_("layers.0.checkpoint_modules", ["mlp"])], True),
    ("selective: no modules", False, [with_(SEL, "selective")], True),
    ("selective: empty modules", False, [with_(SEL, "selective"), with_("layers.0.checkpoint_modules", [])], True),
    ("selective: module twice", False, [with_(SEL, "selective"), with_("layers.0.checkpoint_modules", ["mlp", "mlp"])], True),
    ("selective: unknown module", False, [with_(SEL, "selective"), with_("layers.0.checkpoint_modules", ["attn"])], True),
    ("selective: a linear layer", False, [with_("layers.1.checkpoint", "selective"),
                                          with_("layers.1.checkpoint_modules", ["mlp"])], True),
    ("modules on a full layer", False, [with_("layers.0.checkpoint_modules", ["mlp"])], True),
    ("empty modules on a full layer", True, [with_("layers.0.checkpoint_modules", [])], True),
    ("selective under without-output", False, [with_("checkpoint_style", "without-output"), with_(SEL, "selective"),
                                               with_("layers.0.checkpoint_modules", ["mlp"])], True),
    ("no step", False, [with_("warmup", 0), with_("replays", 0)], True),
    ("microbatch_order: empty", True, [with_("microbatch_order", [])], True),
    ("microbatch_order: a 2", False, [with_("microbatch_order", [1, 2, -1, -1])], True),
    ("shared_pool: 1", False, [with_("shared_pool", 1)], True),
    ("sp: false", True, [with_("sp", False)], True),
    ("sp with tp 2", True, [with_("tp", 2), with_("sp", True)], True),
    ("sp without tp", False, [with_("sp", True)], True),
    ("sp with tp 2 and pp 2", True, [with_("tp", 2), with_("pp", 2), with_("sp", True)], True),
    ("vp 2 with pp 2", True, [with_("pp", 2), with_("vp", 2)], True),
    ("vp 2 without pp", False, [with_("vp", 2)], True),
    ("vp 1 without pp", True, [with_("vp", 1)], True),
    ("vp: true", False, [with_("pp", 2), with_("vp", True)], True),
    ("dp 2 with tp 2 and pp 2", True, [with_("tp", 2), with_("pp", 2), with_("dp", 2)], True),
    ("dp: true", False, [with_("dp", True)], True),
    ("sp: 1", False, [with_("tp", 2), with_("sp", 1)], True),
    ("seeds: 0 and u64 max", True, [with_("seeds", {"param": 0, "data": U64_MAX, "rng": 0})], True),
    ("seeds: -1", False, [with_("seeds.param", -1)], True),
    ("seeds: u64 max + 1", False, [with_("seeds.rng", U64_MAX + 1)], True),
    ("seeds: not an object", False, [with_("seeds", [1, 2, 3])], True),
    ("lr: 10.5", False, [with_("lr", 10.5)], True),
    ("lr: -0.01", False, [with_("lr", -0.01)], True),
    ("faults: one", True, [with_("faults", ["rng-offset-baked"])], True),
    ("faults: empty", True, [with_("faults", [])], True),
    ("faults: not an array", False, [with_("faults", "rng-offset-baked")], True),
    ("faults: unknown name", False, [with_("faults", ["bogus"])], True),
    ("expected: any JSON", True, [with_("expected", [1, "x", None])], True),
    ("name: a number", False, [with_("name", 3)], True),
    ("description: null", False, [with_("description", None)], True),
    ("sut: torch with version", True, [with_("sut", {"name": "torch", "version": "2.11.0+cu130"})], False),
    ("sut: megatron with a framework mutant", True, [with_("sut", {"name": "megatron", "version": "0.15.3",
                                                                   "framework_mutant": "ckpt-no-rng-preserve"})], False),
    ("sut: recap", True, [with_("sut", {"name": "recap"})], False),
    ("sut: no name", False, [with_("sut", {"version": "1"})], False),
    ("sut: not an object", False, [with_("sut", "torch")], False),
    ("sut: version with a space", False, [with_("sut", {"name": "torch", "version": "2.11 0"})], False),
    ("sut: name with @", False, [with_("sut", {"name": "torch@2.11"})], False),
    ("sut: recap with a framework mutant", False, [with_("sut", {"name": "recap", "framework_mutant": "x"})], False),
]

# Integer ranges (and lr's): both ends are valid, one past either end is not; (path, lo, hi, setup).
RANGES: List[Tuple[str, int, int, List[Callable[[Dict[str, Any]], None]]]] = [
    ("hidden", 1, 4096, [with_("layers", [{"kind": "linear"}])]),
    ("tokens", 1, 8192, []),
    ("layers.0.heads", 1, 64, [with_("hidden", 64)]),
    ("layers.0.ffn_hidden", 0, 16384, []),
    ("warmup", 0, 3, []),
    ("replays", 0, 1000, []),
    ("microbatches", 1, 16, [with_("microbatch_order", DEL)]),
    ("lr", 0, 10, []),
    ("tp", 1, 64, []),
    ("pp", 1, 64, []),
    ("vp", 1, 16, [with_("pp", 2)]),
    ("dp", 1, 64, []),
]
for _path, _lo, _hi, _setup in RANGES:
    PROBES += [(f"{_path}: {v}", ok, _setup + [with_(_path, v)], True)
               for v, ok in ((_lo - 1, False), (_lo, True), (_hi, True), (_hi + 1, False))]

# Every enum of the schema: (dotted path in BASE, where the schema lists it, where C++ lists it).
ENUMS = [
    ("dtype", ("properties", "dtype"), ("harness/runtime/tensor.h", "kDTypeNames")),
    ("checkpoint_style", ("properties", "checkpoint_style"), ("harness/training/spec.h", "kStyleNames")),
    ("policy", ("properties", "policy"), ("harness/training/spec.h", "kPolicyNames")),
    ("executor", ("properties", "executor"), ("harness/training/spec.h", "kExecutorNames")),
    ("generator", ("properties", "generator"), ("harness/runtime/generator.h", "kGeneratorModeNames")),
    ("device_state", ("properties", "device_state"), ("harness/runtime/generator.h", "kDeviceStateModelNames")),
    ("warmup_backward", ("properties", "warmup_backward"), ("harness/training/spec.h", "kWarmupBackwardNames")),
    ("layers.1.kind", ("$defs", "layer", "properties", "kind"), ("models/registry.cpp", "layer_kinds")),
    ("layers.0.checkpoint", ("$defs", "layer", "properties", "checkpoint", "anyOf", 0), ("harness/training/spec.h", "kGranularityNames")),
    ("faults.0", ("properties", "faults", "items"), ("harness/runtime/faults.h", "kFaultNames")),
    ("sut.name", ("properties", "sut", "properties", "name"), ("harness/cli/cli.cpp", "parse_sut")),
]


def cpp_names(path: str, table: str) -> List[str]:
    """The names of a C++ enum-name table (`{X::Y, "name"}`), of layer_kinds() (`{"name", bool`) or
    of parse_sut's `c.kind != "name"` chain, read from the source."""
    text = open(os.path.join(SRC, path)).read()
    start = text.index(table)
    if table == "layer_kinds":
        body = text[start:text.index("return kinds", start)]
        return re.findall(r'\{"([a-z-]+)", (?:true|false)', body)
    if table == "parse_sut":
        start = text.index("std::string parse_sut(")
        body = text[start:text.index("return", start)]
        return re.findall(r'c\.kind != "([a-z-]+)"', body)
    body = text[start:text.index("};", start)]
    return re.findall(r'\{\s*\w+::\w+,\s*"([^"]+)"\}', body)


def check_enums() -> None:
    for path, where, (cpp_file, table) in ENUMS:
        node: Any = SCHEMA
        for k in where:
            node = node[k]
        values = node["enum"]
        cpp = cpp_names(cpp_file, table)
        if not cpp or sorted(values) != sorted(cpp):
            fail(f"{path}: the schema lists {values}, {cpp_file} ({table}) {cpp}")
        sut_only = path.startswith("sut")
        for v in values:  # each value alone, in a case where it makes sense
            edits = [with_(path, v)]
            if path == "faults.0":
                edits = [with_("faults", [v])]
            if path == "layers.0.checkpoint" and v == "selective":
                edits.append(with_("layers.0.checkpoint_modules", ["mlp"]))
            check(f"{path}: {v}", json.dumps(apply(edits)), True, not sut_only)
        edits = [with_("faults", ["bogus"])] if path == "faults.0" else [with_(path, "bogus")]
        name = f"{path}: bogus" if path != "faults.0" else "faults: unknown name"
        if name not in {p[0] for p in PROBES}:
            check(name, json.dumps(apply(edits)), False, not sut_only)
    print(f"enums: {len(ENUMS)} enums match the C++ tables")


def apply(edits: List[Callable[[Dict[str, Any]], None]]) -> Dict[str, Any]:
    c = copy.deepcopy(BASE)
    for e in edits:
        e(c)
    return c


def check_probes() -> None:
    for name, valid, edits, python in PROBES:
        check(name, json.dumps(apply(edits)), valid, python)
    check("not an object", "[]", False)
    check("layers: an object in an array of strings", '{"layers": [{"kind": "gelu"}, "gelu"]}', False)
    # Numbers written as floats: recap's integers are JSON integers, which a schema cannot say
    # (8.0 is the integer 8 to JSON Schema): the readers must still reject them.
    text = json.dumps(BASE).replace('"hidden": 16', '"hidden": 16.0')
    for reader, why in (("recap", recap_verdict(text)), ("python", python_verdict(text))):
        if why == "" or why.startswith("!"):
            fail(f"hidden: 16.0: {reader} {'accepts it' if why == '' else why}")
    print(f"probes: {len(PROBES)} probes")


def main() -> int:
    if PART in ("all", "probes"):
        check_probes()
        check_enums()
    if PART in ("all", "files"):
        check_files()
    if PART in ("all", "fuzz"):
        check_fuzz()
    if failures:
        print(f"{len(failures)} disagreements between the case schema, recap and recap_drivers.case")
        return 1
    print("the case schema, recap's reader and recap_drivers.case agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
