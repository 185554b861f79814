#!/usr/bin/env python3
"""Prints a recap report without what may differ between two runs of the same seed: the run
context, timings (--profile's too), throughput and where files were written. Two campaigns with the same seed must
print the same bytes (README, "Reports"): `diff <(scripts/report-canon.py a.json) <(scripts/report-canon.py b.json)`."""
import json
import sys


def canon(report):
    report.pop("context", None)
    summary = report.get("summary", {})
    for key in ("seconds", "cases_per_minute", "profile"):  # profile: --profile's timings
        summary.pop(key, None)
    for failure in summary.get("failures", []):
        failure.pop("corpus_file", None)
        failure.pop("replay_command", None)
    # --gpus: per job and device, their times and rates, and the cases each job and device ran (jobs
    # claim chunks as they are free: which ran which is the schedule's, not the campaign's)
    gpus = report.get("gpus")
    if isinstance(gpus, dict):
        for part in gpus.get("jobs", []) + gpus.get("devices", []):
            part.pop("cases", None)
        for part in [gpus] + gpus.get("jobs", []) + gpus.get("devices", []):
            part.pop("seconds", None)
            part.pop("cases_per_minute", None)
    for case in report.get("cases", []) + report.get("replays", []):
        case.pop("timings", None)
        case.pop("seconds", None)
        case.get("report", {}).pop("timings", None)
    return report


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/report-canon.py REPORT.json")
    with open(sys.argv[1]) as f:
        print(json.dumps(canon(json.load(f)), indent=1))
