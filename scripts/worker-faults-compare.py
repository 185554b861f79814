#!/usr/bin/env python3
"""Compares a fuzz campaign run with planted worker faults (RECAP_WORKER_FAULT, drivers/PROTOCOL.md
section 4d) with the same campaign without them (issue 21, point 4):

  worker-faults-compare.py CLEAN.json CLEAN_CORPUS FAULTED.json FAULTED_CORPUS KIND:INDEX [...]

KIND:INDEX: the fault planted and the index of its case in the reports' cases (as
`python3 -m recap_drivers.core.worker_faults pick` printed them). Holds when
  - the faulted campaign ran every case (it completed);
  - each faulted case is the clean run's case (same spec, passed there) and is now `crashed`
    (lost-context: "the CUDA context is lost" and the sticky error in the reason and as the bucket's
    error; kill-in-capture: "died of signal 9 (SIGKILL)" and the worker's line saying where) or
    `out-of-memory` (memory-cap);
  - every other case's report equals the clean run's (scripts/report-canon.py's fields);
  - the counterexamples (summary.failures) are the clean run's plus one per crashed fault, that one
    confirmed on a fresh worker (not flaky) and written;
  - the clean run's corpus files are all in the faulted run's, byte for byte, and the only other
    files are the crashed faults'.
Prints one line per fault and `worker faults: ok`, or every problem found and exit status 1.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
canon = __import__("report-canon").canon


def bucket(case):
    """The error slot and reason of the case's capture_clean check."""
    k = next((k for k in case.get("checks", []) if k.get("property") == "capture_clean"), {})
    return k.get("capture_error", {}).get("error", ""), k.get("reason", "")


def main(argv):
    if len(argv) < 5:
        sys.exit(__doc__.split("\n\n")[1])
    clean, faulted = (canon(json.load(open(p))) for p in (argv[0], argv[2]))
    clean_dir, fault_dir = argv[1], argv[3]
    faults = {}
    for a in argv[4:]:
        kind, _, i = a.partition(":")
        faults[int(i)] = kind
    problems = []
    a, b = clean["cases"], faulted["cases"]
    if len(a) != len(b):
        problems.append(f"{len(b)} cases ran with the faults, {len(a)} without")
    odd = [k for k in range(min(len(a), len(b))) if a[k] != b[k] and k not in faults]
    for k in odd:
        problems.append(f"case {k}: {b[k].get('disposition')} ({b[k].get('first_failure', '')[:200]}), "
                        f"without the faults {a[k].get('disposition')}")
    crashed = 0
    for i, kind in sorted(faults.items()):
        if i >= len(b):
            problems.append(f"{kind}: case {i} did not run")
            continue
        c = b[i]
        error, reason = bucket(c)
        if a[i].get("disposition") != "passed" or c.get("spec") != a[i].get("spec"):
            problems.append(f"{kind}: case {i} is not a case that passed without the faults")
        want = "out-of-memory" if kind == "memory-cap" else "crashed"
        if c.get("disposition") != want:
            problems.append(f"{kind}: case {i} is {c.get('disposition')} ({reason[:300]}), {want} expected")
            continue
        if kind == "lost-context":
            crashed += 1
            if "the CUDA context is lost: " not in reason or error not in reason or not error.startswith("cudaError"):
                problems.append(f"{kind}: case {i}: the reason does not name the sticky error: {reason[:300]} ({error})")
        elif kind == "kill-in-capture":
            crashed += 1
            if error != "SIGKILL" or "died of signal 9 (SIGKILL)" not in reason or \
                    "RECAP_WORKER_FAULT kill-in-capture: SIGKILL " not in reason:
                problems.append(f"{kind}: case {i}: the reason does not name SIGKILL and where: {reason[:300]} ({error})")
        elif kind == "memory-cap":
            if not reason.startswith("out of device memory: ") or error not in ("cudaErrorMemoryAllocation", "OutOfMemoryError"):
                problems.append(f"{kind}: case {i}: not the allocator's refusal: {reason[:300]} ({error})")
        print(f"{kind}: case {i} {c.get('disposition')} ({error}): {reason[:400]}")
    fa, fb = clean["summary"].get("failures", []), faulted["summary"].get("failures", [])
    extra = [f for f in fb if f not in fa]
    missing = [f for f in fa if f not in fb]
    if missing:
        problems.append(f"counterexamples of the clean run missing: {[f.get('bucket') for f in missing]}")
    if len(extra) != crashed or any(f.get("disposition") != "crashed" or f.get("flaky") for f in extra):
        problems.append("new counterexamples: " + "; ".join(f"{f.get('bucket')} {f.get('disposition')} "
                                                           f"flaky={f.get('flaky', '')!r}" for f in extra) +
                        f" ({crashed} crashed faults, each confirmed, expected)")
    names_a = set(os.listdir(clean_dir)) if os.path.isdir(clean_dir) else set()
    names_b = set(os.listdir(fault_dir)) if os.path.isdir(fault_dir) else set()
    for n in sorted(names_a):
        if n not in names_b:
            problems.append(f"corpus: {n} of the clean run is missing")
        elif open(os.path.join(clean_dir, n), "rb").read() != open(os.path.join(fault_dir, n), "rb").read():
            problems.append(f"corpus: {n} differs from the clean run's")
    new_files = sorted(names_b - names_a)
    if len(new_files) != crashed:
        problems.append(f"corpus: new files {new_files}, {crashed} (one per crashed fault) expected")
    for p in problems:
        print("PROBLEM:", p)
    if problems:
        return 1
    print(f"worker faults: ok ({len(faults)} faults, {len(b)} cases, the other {len(b) - len(faults)} as without them; "
          f"corpus {len(names_a)} files + {len(new_files)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
