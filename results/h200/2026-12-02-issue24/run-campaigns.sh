#!/usr/bin/env bash
# The three framework campaigns of issue 18 again, at this tree's commit (after issue 24's drivers
# package and one-result-shape refactor), exactly as results/h200/2026-12-02-issue18/run-b.sh ran
# them: seed 1, 500 cases each, chunks of 25, all three at once (torch 5 jobs, megatron@0.15.3 and
# @0.19.2 6 jobs each), each with its SUT's known findings, corpus files replayed on the same SUT.
set -u
. scripts/gpu-out.sh
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_WORKER_RETIRE_MIB=192
export RECAP_BIN=$PWD/.device/slim/harness/cli/recap
B=${BUDGET:-430} L=${LIMIT:-500}
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; } > "$o/machine.txt" 2>&1
OUT="$o/t" CAMPAIGNS="torch" BUDGET_torch=$B LIMIT_torch=$L SHRINK_LIMIT=12 CHUNK_CASES=25 \
  REPLAY_DEADLINE=$(( t0 + 560 )) scripts/gpu-sut-campaigns.sh 500 5 &
OUT="$o/m15" CAMPAIGNS=megatron-0.15.3 BUDGET_megatron_0_15_3=$B LIMIT_megatron_0_15_3=$L SHRINK_LIMIT=12 \
  CHUNK_CASES=25 REPLAY_DEADLINE=$(( t0 + 560 )) scripts/gpu-sut-campaigns.sh 500 6 &
OUT="$o/m19" CAMPAIGNS=megatron-0.19.2 BUDGET_megatron_0_19_2=$B LIMIT_megatron_0_19_2=$L SHRINK_LIMIT=12 \
  CHUNK_CASES=25 REPLAY_DEADLINE=$(( t0 + 560 )) scripts/gpu-sut-campaigns.sh 500 6 &
wait
cat "$o"/*/summary.txt | grep -v "reproduce:" | tail -n 60
