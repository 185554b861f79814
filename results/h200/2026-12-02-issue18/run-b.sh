#!/usr/bin/env bash
# Issue 18 on the H200, call B (from the tree's root; .device and .whl carried): the three framework
# campaigns with this tree's harness, seed 1, 500 cases each, chunks of 25, all three at once
# (torch 5 jobs, megatron@0.15.3 and @0.19.2 6 jobs each, 16 cores), each with its SUT's known
# findings (corpus/known-findings/), every corpus file found and kept replayed on the same SUT.
set -u
. scripts/gpu-out.sh
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_WORKER_RETIRE_MIB=192
export RECAP_BIN=$PWD/.device/slim/harness/cli/recap
B=${BUDGET:-430} L=${LIMIT:-500}
OUT="$o/t" CAMPAIGNS="torch" BUDGET_torch=$B LIMIT_torch=$L SHRINK_LIMIT=12 CHUNK_CASES=25 \
  REPLAY_DEADLINE=$(( t0 + 560 )) scripts/gpu-sut-campaigns.sh 500 5 &
OUT="$o/m15" CAMPAIGNS=megatron-0.15.3 BUDGET_megatron_0_15_3=$B LIMIT_megatron_0_15_3=$L SHRINK_LIMIT=12 \
  CHUNK_CASES=25 REPLAY_DEADLINE=$(( t0 + 560 )) scripts/gpu-sut-campaigns.sh 500 6 &
OUT="$o/m19" CAMPAIGNS=megatron-0.19.2 BUDGET_megatron_0_19_2=$B LIMIT_megatron_0_19_2=$L SHRINK_LIMIT=12 \
  CHUNK_CASES=25 REPLAY_DEADLINE=$(( t0 + 560 )) scripts/gpu-sut-campaigns.sh 500 6 &
wait
cat "$o"/*/summary.txt | grep -v "reproduce:" | tail -n 60
