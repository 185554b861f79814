#!/usr/bin/env bash
# Issue 20's triage on the H200 (from the tree's root; .whl and .device carried): the standalone
# reproducers of M9, M10 and M11 (megatron-core and torch only, no recap code) on every release and
# on Megatron-LM main. One txt per (reproducer, version) in $o, and summary.txt with each exit code
# (1 reproduced, 0 not, 2 could not run, 124 timed out). The versions run side by side, the three
# reproducers of a version one after another, each under `timeout 120`; well under 5 minutes.
#   bash results/h200/2026-12-02-issue20/run-repros.sh
set -u
. scripts/gpu-out.sh
t0=$(date +%s)
here=results/h200/2026-12-02-issue20
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
V=(${VERSIONS:-0.15.3 0.16.1 0.17.1 0.18.2 0.19.2 main})
R=(${REPROS:-m9 m10 m11})
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; nproc; } > "$o/machine.txt" 2>&1
site() {  # the PYTHONPATH of a version
  if [ "$1" = main ]; then echo "$PWD/.device/megatron-main"; return; fi
  local d=/tmp/recap-site-$1
  [ -d "$d/megatron" ] || pip install -q --no-deps --target "$d" .whl/megatron_core-"$1"-*.whl >> "$o/pip.log" 2>&1
  echo "$d"
}
for v in "${V[@]}"; do site "$v" > /dev/null; done  # installed once, before anything runs in parallel
one_version() {
  local v=$1 r rc s
  for r in "${R[@]}"; do
    s=$(date +%s)
    PYTHONPATH="$(site "$v")" timeout 120 python3 "$here/${r}_repro.py" > "$o/$r-$v.txt" 2>&1
    rc=$?
    echo "$r $v: exit $rc, $(( $(date +%s) - s )) s: $(grep -E '^M[0-9]+ |^could not|^cannot|^needs' "$o/$r-$v.txt" | tail -n 1)" >> "$o/summary.txt"
  done
}
for v in "${V[@]}"; do one_version "$v" & done
wait
echo "[$(( $(date +%s) - t0 )) s] done" >> "$o/summary.txt"
sort "$o/summary.txt"
