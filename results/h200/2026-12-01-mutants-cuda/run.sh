#!/usr/bin/env bash
# Issue 9 on the H200: the fault points that involve real CUDA behaviour, killed on `cuda` too.
# One campaign per fault (recap mutants, seed 1, 100 cases), after a clean graph-safe baseline of
# the same campaign; each kill shrunk and written, then replayed on cuda in a fresh process.
#   bash results/h200/2026-12-01-mutants-cuda/run.sh      # there, from the tree's root
set -u
. scripts/gpu-out.sh  # $o, packed into one all.tgz on every exit
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
bin="${RECAP_BIN:-.device/slim/harness/cli/recap}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$o/device.txt" 2>&1
timeout 300 "$bin" mutants --backend cuda --seed 1 --cases 100 --fault alloc-in-capture --fault side-stream-unjoined \
  --fault free-under-graph --fault static-input-stale --fault pool-order \
  --corpus-dir "$o/corpus" --report "$o/mutants-cuda.json" > "$o/mutants-cuda.log" 2>&1
echo "mutants exit $?" >> "$o/mutants-cuda.log"
timeout 120 "$bin" replay --backend cuda "$o"/corpus/*.json > "$o/replay-cuda.log" 2>&1
echo "replay exit $?" >> "$o/replay-cuda.log"
cat "$o/device.txt" "$o/mutants-cuda.log"; tail -n 3 "$o/replay-cuda.log"
