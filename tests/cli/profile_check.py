#!/usr/bin/env python3
"""profile_check.py REPORT KIND: the structure and consistency of --profile in a recap.report/1
(docs/profile.md), never a timing: every case report has timings.profile; every figure is a
non-negative number; each run's disjoint phases and other_ms add up to its total, its within-counters
are no larger than it; the runs, the oracles and other_ms add up to the case's wall time. KIND sim:
recap's runtime in process (start-up, model build, a synchronization in every run); torch: a worker
(recap's request, exchange, decode, and the driver's own phases). The summary has the table's rows."""
import json
import sys

DISJOINT = ["startup_ms", "model_build_ms", "eager_steps_ms", "warmup_ms", "capture_ms", "replay_ms", "hygiene_ms",
            "teardown_ms", "request_ms", "exchange_ms", "decode_ms", "encode_ms"]
WITHIN = ["h2d_ms", "d2h_ms", "sync_ms", "sim_work_ms", "launch_ms", "alloc_ms", "host_data_ms"]


def close(a, b):
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def main(path, kind):
    rep = json.load(open(path))
    cases = rep["cases"] + [r["report"] for r in rep.get("replays", [])]
    assert cases, "no case"
    runs_seen = 0
    for i, c in enumerate(cases):
        where = f"case {i}"
        p = c["timings"].get("profile")
        assert isinstance(p, dict), f"{where}: no timings.profile"
        assert set(p) == {"wall_ms", "runs", "oracles", "other_ms"}, f"{where}: keys {sorted(p)}"
        for k, v in p["oracles"].items():
            assert k.endswith("_ms") and v >= 0, f"{where}: oracle {k} = {v}"
        parts = p["other_ms"] + sum(r["total_ms"] for r in p["runs"].values()) + sum(p["oracles"].values())
        assert close(parts, p["wall_ms"]) or parts <= p["wall_ms"], f"{where}: parts {parts} vs wall {p['wall_ms']}"
        if c["disposition"] != "skipped" or p["runs"]:
            assert "case" in p["runs"], f"{where}: the case's own run is missing ({sorted(p['runs'])})"
        for name, r in p["runs"].items():
            runs_seen += 1
            w = f"{where}, run {name}"
            for k, v in r.items():
                if k == "worker":
                    for wk, wv in v.items():
                        assert isinstance(wv, (int, float)) and wv >= 0, f"{w}: worker {wk} = {wv}"
                    continue
                assert k in DISJOINT or k in WITHIN or k in ("total_ms", "other_ms"), f"{w}: unknown phase {k}"
                assert isinstance(v, (int, float)) and v >= 0, f"{w}: {k} = {v}"
            disjoint = sum(r.get(k, 0) for k in DISJOINT)
            assert disjoint <= r["total_ms"] * (1 + 1e-9) + 1e-6, f"{w}: phases {disjoint} > total {r['total_ms']}"
            assert close(disjoint + r["other_ms"], r["total_ms"]), f"{w}: phases + other != total"
            for k in WITHIN:
                assert r.get(k, 0) <= r["total_ms"] * (1 + 1e-9) + 1e-6, f"{w}: {k} over the run's time"
            if kind == "sim" and "crash" not in name:
                for k in ("startup_ms", "model_build_ms", "teardown_ms", "sync_ms"):
                    assert k in r, f"{w}: no {k} ({sorted(r)})"
            if kind == "torch":
                for k in ("request_ms", "exchange_ms", "decode_ms"):
                    assert k in r, f"{w}: no {k} ({sorted(r)})"
                wk = r.get("worker")
                assert isinstance(wk, dict), f"{w}: the driver sent no timings.profile"
                if c["disposition"] != "skipped":
                    for k in ("parse_ms", "model_build_ms", "encode_ms", "run_ms"):
                        assert k in wk, f"{w}: the driver's {k} is missing ({sorted(wk)})"
                    assert wk["run_ms"] <= r["exchange_ms"] * (1 + 1e-9) + 1e-6, f"{w}: the driver's run over the exchange"
    assert runs_seen, "no run profiled"
    s = rep["summary"].get("profile")
    assert isinstance(s, dict) and s["cases"] == len(cases), f"summary.profile: {s if s is None else s.get('cases')}"
    names = {r["phase"] for r in s["phases"]}
    need = {"case", "run.case", "other"}
    # a worker is started and greeted before the first case: its runs have no start-up of their own
    need |= {"runs.exchange", "worker.model_build"} if kind == "torch" else {"runs.startup", "runs.model_build"}
    assert need <= names, f"summary rows lack {sorted(need - names)}"
    for r in s["phases"]:
        assert r["median_ms"] <= r["p90_ms"] + 1e-9, f"{r['phase']}: median over p90"
    print(f"profile ok: {path}: {len(cases)} cases, {runs_seen} runs, {len(names)} summary rows")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
