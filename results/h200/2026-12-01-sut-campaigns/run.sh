#!/usr/bin/env bash
# The framework campaigns of this report, on the H200 (one device call, from the tree's root, with
# the stripped gpu-preset recap in .device/slim and the megatron-core wheels in .whl carried):
# three campaigns at once (each chunk of 100 cases is one worker process, and the GPU is mostly
# idle for these small cases), then the no-false-alarm campaign in the torch lane.
set -u
o="${OUT:-gpu-logs}"
mkdir -p "$o"
export SHRINK_LIMIT="${SHRINK_LIMIT:-12}"
lane() { local name=$1; shift; OUT="$o/$name" CAMPAIGNS="$name" "$@"; }
( lane torch env BUDGET_torch=200 LIMIT_torch=330 scripts/gpu-sut-campaigns.sh 500 5
  lane torch-no-ckpt-no-dropout env BUDGET_torch_no_ckpt_no_dropout=100 LIMIT_torch_no_ckpt_no_dropout=140 \
    scripts/gpu-sut-campaigns.sh 500 5 ) > "$o/lane-torch.txt" 2>&1 &
lane megatron-0.15.3 env BUDGET_megatron_0_15_3=330 LIMIT_megatron_0_15_3=440 scripts/gpu-sut-campaigns.sh 500 5 \
  > "$o/lane-mc0153.txt" 2>&1 &
lane megatron-0.19.2 env BUDGET_megatron_0_19_2=330 LIMIT_megatron_0_19_2=440 scripts/gpu-sut-campaigns.sh 500 5 \
  > "$o/lane-mc0192.txt" 2>&1 &
wait
cat "$o"/*/summary.txt
