#!/usr/bin/env bash
# Issue 20's triage checked on the H200 (from the tree's root; .whl and .device carried), in one call:
#  - repros/: run-repros.sh, the standalone reproducers of M9, M10, M11 on every version;
#  - controls/: the controls (no checkpoints, no dropout; 300 cases, seed 1) of 0.16.1, 0.17.1 and
#    0.18.2 again, now that the driver empties 0.16-0.18's graph-buffer reuse pool between cases
#    (8f498e2: the 0.18.2 bucket was M10 carried from one case into the next), and 0.15.3's
#    control in full (it was cut at 161 cases, and its workers' results were lost to the doubled
#    SIGTERM fixed with this call's commit).
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-02-issue20/run-retriage.sh
set -u
. scripts/gpu-out.sh
here=results/h200/2026-12-02-issue20
OUT="$o/repros" bash $here/run-repros.sh > /dev/null 2>&1 &
OUT="$o/controls" VERSIONS="0.16.1 0.17.1 0.18.2" SUFFIX=-control CASES=300 JOBS=3 BUDGET=330 LIMIT=400 \
  bash $here/run-campaigns.sh > /dev/null 2>&1 &
OUT="$o/control-0.15.3" VERSIONS="0.15.3" SUFFIX=-control CASES=300 JOBS=5 BUDGET=380 LIMIT=440 \
  bash $here/run-campaigns.sh > /dev/null 2>&1 &
wait
cat "$o"/repros/summary.txt 2>/dev/null
for f in "$o"/controls/*/summary.txt "$o"/control-0.15.3/*/summary.txt; do grep -v "reproduce:" "$f" | head -n 30; done
