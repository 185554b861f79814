#!/usr/bin/env bash
# The megatron@0.15.3 and torch campaigns again with this tree's harness (chunks of 25 cases, the
# runaway-backward check, the out-of-memory disposition, the cuBLAS-workspace clearing), as
# ../2026-12-01-megatron-0.19.2-500/run5.sh ran megatron@0.19.2: seed 1, 500 cases each. megatron
# with 10 jobs; beside it torch and torch without checkpoints and dropout, 5 jobs, one after the
# other. Every campaign's corpus files, and the files kept in corpus/frameworks/, are replayed.
set -u
. scripts/gpu-out.sh  # $o, packed into one all.tgz on every exit
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_WORKER_RETIRE_MIB=192
OUT="$o/t" CAMPAIGNS="torch torch-no-ckpt-no-dropout" BUDGET_torch=200 LIMIT_torch=260 \
  BUDGET_torch_no_ckpt_no_dropout=100 LIMIT_torch_no_ckpt_no_dropout=140 SHRINK_LIMIT=12 CHUNK_CASES=25 \
  REPLAY_DEADLINE=$(( t0 + 500 )) scripts/gpu-sut-campaigns.sh 500 5 &
OUT="$o/m" CAMPAIGNS=megatron-0.15.3 BUDGET_megatron_0_15_3=330 LIMIT_megatron_0_15_3=400 SHRINK_LIMIT=12 \
  CHUNK_CASES=25 REPLAY_DEADLINE=$(( t0 + 500 )) scripts/gpu-sut-campaigns.sh 500 10
wait
cat "$o"/t/summary.txt "$o"/m/summary.txt | grep -v "reproduce:" | tail -n 60
