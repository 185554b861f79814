#!/usr/bin/env bash
# Issue 21, point 4 on the GPU: workers that survive it. A torch campaign on CUDA (>= 200 cases,
# several workers on the one GPU, each capped by RECAP_CUDA_MEMORY_FRACTION) without faults, then
# the same campaign with the three planted worker faults (RECAP_WORKER_FAULT, drivers/PROTOCOL.md
# section 4d), each aimed at one case the clean run passed (drivers/recap_drivers/core/
# worker_faults.py pick; kill-in-capture at a graphed case, so it dies inside a capture): a lost CUDA
# context (a real device-side assert), a SIGKILL inside a capture, an exhausted memory cap. Holds
# when the campaign completes, each fault is one crashed or out-of-memory case with its reason, and
# every other case, counterexample and corpus file is the clean run's (scripts/worker-faults-compare.py).
#   scripts/gpu-worker-faults.sh [CASES] [JOBS]       # there, from the tree's root
# Environment: RECAP_BIN (default .device/slim/harness/cli/recap, else build-gpu/harness/cli/recap),
# SEED (1), CHUNK_CASES (10), SHRINK_LIMIT (10), RECAP_CUDA_MEMORY_FRACTION (0.9 / JOBS), BACKEND
# (cuda; sim for a dry run of the script on a machine without a GPU: the workers then run on the CPU), OUT
# (default gpu-logs; packed into all.tgz by scripts/gpu-out.sh). Writes clean.{json,log},
# faulted.{json,log}, picked.txt, compare.txt, both corpora, machine.txt. Exit 0 when it holds.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/gpu-out.sh
cases="${1:-240}"
jobs="${2:-5}"
bin="${RECAP_BIN:-.device/slim/harness/cli/recap}"
[ -x "$bin" ] || bin=build-gpu/harness/cli/recap
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# the workers' stderr in the logs: the faults' own lines, and what each worker said when it died
export RECAP_WORKER_STDERR=1
# every worker capped to its share of the GPU: memory-cap exhausts its own cap, not the others' memory
export RECAP_CUDA_MEMORY_FRACTION="${RECAP_CUDA_MEMORY_FRACTION:-$(python3 -c "print(round(0.9 / $jobs, 3))")}"
export PYTHONPATH="$PWD/drivers${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi -L 2>&1 || true; python3 -c 'import torch; print("torch", torch.__version__)'
  echo "commit ${RECAP_GIT_COMMIT:-${RECAP_COMMIT:-?}}; $cases cases, $jobs jobs, RECAP_CUDA_MEMORY_FRACTION=$RECAP_CUDA_MEMORY_FRACTION"; } \
  > "$o/machine.txt" 2>&1
args=(--sut torch --backend "${BACKEND:-cuda}" --seed "${SEED:-1}" --cases "$cases" --jobs "$jobs" --chunk-cases "${CHUNK_CASES:-10}"
      --shrink-limit "${SHRINK_LIMIT:-10}" --case-timeout 300 --worker-env "PYTHONPATH=$PYTHONPATH")
[ -f corpus/known-findings/torch-2.11.json ] && args+=(--known-findings corpus/known-findings/torch-2.11.json)

t0=$(date +%s)
"$bin" fuzz "${args[@]}" --corpus-dir "$o/clean-corpus" --report "$o/clean.json" > "$o/clean.log" 2>&1
echo "clean: exit $?, $(( $(date +%s) - t0 )) s" | tee "$o/summary.txt"
python3 -m recap_drivers.core.worker_faults pick "$o/clean.json" lost-context kill-in-capture memory-cap \
  > "$o/picked.txt" 2>> "$o/summary.txt" || { cat "$o/summary.txt"; exit 1; }
cat "$o/picked.txt" | tee -a "$o/summary.txt"
spec=$(awk '{printf "%s%s@%s", (NR > 1 ? "," : ""), $1, $3}' "$o/picked.txt")
which=$(awk '{printf "%s:%s ", $1, $2}' "$o/picked.txt")

t1=$(date +%s)
# shellcheck disable=SC2086
"$bin" fuzz "${args[@]}" --worker-env "RECAP_WORKER_FAULT=$spec" --corpus-dir "$o/faulted-corpus" \
  --report "$o/faulted.json" > "$o/faulted.log" 2>&1
echo "faulted (RECAP_WORKER_FAULT=$spec): exit $?, $(( $(date +%s) - t1 )) s" | tee -a "$o/summary.txt"
grep -h "RECAP_WORKER_FAULT" "$o/faulted.log" | sort | uniq -c | head -n 20 | tee -a "$o/summary.txt"
# shellcheck disable=SC2086
python3 scripts/worker-faults-compare.py "$o/clean.json" "$o/clean-corpus" "$o/faulted.json" "$o/faulted-corpus" $which \
  > "$o/compare.txt" 2>&1
status=$?
cat "$o/compare.txt" | tee -a "$o/summary.txt"
exit $status
