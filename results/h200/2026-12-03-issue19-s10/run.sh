#!/usr/bin/env bash
# Issue 19's compute-bound trade-off reports, prepared for the next device calls (from the tree's
# root; .device and .whl carried). Arguments: the systems to run, in order, out of
#   torch  mcore-gs (megatron@0.19.2 with the graph-safe recompute option)  mcore (megatron@0.19.2)
#   mcore15 (megatron@0.15.3)  mcore15-launch (megatron@0.15.3, the launch-bound size)
# Each gets an equal share of what is left of the call's CALL_S seconds (default 540), under `timeout -k 60`:
# recap tradeoff stops after the configuration it is on at SIGTERM and writes what ran (the rest
# "not run"), and a compute-bound configuration takes up to about 20 s to measure.
# A system named as name:seconds gets that share (its timeout plus the 60 s grace) instead:
#   RECAP_GIT_COMMIT=<sha> bash results/h200/next-issue19-compute/run.sh mcore15-launch:150 mcore-gs
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_EXT_DIR=/tmp/recap-ext
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc --all; } > "$o/machine.txt" 2>&1
for v in 0.19.2 0.15.3; do pip install -q --no-deps --target /tmp/recap-site-$v .whl/megatron_core-$v-*.whl >> "$o/pip.log" 2>&1; done
C=benchmarks/tradeoff-sweep-h200-compute-bound-dropout0.json
L=benchmarks/tradeoff-sweep-h200-launch-bound-dropout0.json
GS=(--worker-env RECAP_MEGATRON_RECOMPUTE=graph-safe --worker-env RECAP_EXT_DIR=$RECAP_EXT_DIR)
CALL_S=${CALL_S:-540}
left_n=$#
for arg in "$@"; do
  n=${arg%%:*}; cap=; [ "$n" != "$arg" ] && cap=${arg#*:}  # name:seconds gives a system a fixed share
  share=$(( (CALL_S - 20 - SECONDS) / left_n )); left_n=$(( left_n - 1 ))  # a fast system leaves its time to the next
  [ -n "$cap" ] && share=$cap
  case $n in
    torch) args=(--sweep $C --sut torch --worker-env "PYTHONPATH=$PWD/drivers" --known-findings corpus/known-findings/torch-2.11.json) ;;
    mcore-gs) args=(--sweep $C --sut megatron@0.19.2 --worker-env "PYTHONPATH=/tmp/recap-site-0.19.2:$PWD/drivers" "${GS[@]}"
                    --known-findings corpus/known-findings/megatron-0.19.2+graph-safe-recompute.json) ;;
    mcore) args=(--sweep $C --sut megatron@0.19.2 --worker-env "PYTHONPATH=/tmp/recap-site-0.19.2:$PWD/drivers"
                 --known-findings corpus/known-findings/megatron-0.19.2.json) ;;
    mcore15) args=(--sweep $C --sut megatron@0.15.3 --worker-env "PYTHONPATH=/tmp/recap-site-0.15.3:$PWD/drivers"
                   --known-findings corpus/known-findings/megatron-0.15.3.json) ;;
    mcore15-launch) args=(--sweep $L --sut megatron@0.15.3 --worker-env "PYTHONPATH=/tmp/recap-site-0.15.3:$PWD/drivers"
                          --known-findings corpus/known-findings/megatron-0.15.3.json) ;;
    *) echo "unknown system $n" >> "$o/errors.txt"; continue ;;
  esac
  t=$(( share - 60 )); left=$(( CALL_S - 70 - SECONDS )); [ $left -lt $t ] && t=$left
  [ $t -gt 60 ] || { echo "no time left (${SECONDS}s)" > "$o/tradeoff-$n.log"; continue; }
  timeout -k 60 $t "$B" tradeoff --backend cuda --judge-jobs 6 --report "$o/tradeoff-$n.json" "${args[@]}" \
    > "$o/tradeoff-$n.log" 2>&1
  echo "tradeoff exit $? after ${SECONDS}s (limit ${t}s + 60 s)" >> "$o/tradeoff-$n.log"
done
for arg in "$@"; do n=${arg%%:*}; echo "== $n"; grep -E "^tradeoff: (\[|judging)|exit|interrupted|matmul" "$o/tradeoff-$n.log" | tail -n 30; done
