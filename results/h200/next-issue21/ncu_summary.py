#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel durations by kernel name (run.sh's `kernels` mode).

usage: ncu_summary.py FILE.csv...   (ncu --csv --metrics gpu__time_duration.sum --log-file FILE.csv)
Prints, per file, each kernel's launches, total and mean microseconds and share, largest first.
"""
import collections
import csv
import sys


def summarize(path: str) -> None:
    total = collections.Counter()
    count = collections.Counter()
    with open(path, newline="") as f:
        lines = [ln for ln in f if ln.startswith('"')]  # ncu's own messages are not CSV rows
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row.get("Kernel Name", "?").split("(")[0]
        value = float(row.get("Metric Value", "0").replace(",", ""))
        scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}.get(row.get("Metric Unit", ""), 1.0)
        total[name] += value * scale
        count[name] += 1
    whole = sum(total.values()) or 1.0
    print(f"== {path}: {sum(count.values())} kernels, {whole / 1e3:.1f} ms on the GPU")
    for name, us in total.most_common(25):
        print(f"  {name:<60} {count[name]:>7} launches {us / 1e3:>10.2f} ms  {us / count[name]:>10.1f} us each  {100 * us / whole:5.1f}%")


for p in sys.argv[1:]:
    summarize(p)
