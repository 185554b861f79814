#!/usr/bin/env bash
# Issue 18 on the H200, call D: (1) the two torch mutants whose kills had shrunk into F2's
# configuration, again with the shrink that stays outside known configurations; (2) the flaky
# megatron@0.15.3 case 232 of run-b.sh: replayed alone, after each of the cases its campaign worker
# ran just before it (227: a failed per-layer capture, M2; 231: a skipped case), and after all of
# 225-231, each sequence in one worker (recap replay keeps one worker for the files of one SUT).
set -u
. scripts/gpu-out.sh
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
B=$PWD/.device/slim/harness/cli/recap
pip install -q --no-deps --target /tmp/recap-site-0.15.3 .whl/megatron_core-0.15.3-*.whl > "$o/pip.log" 2>&1
F=results/h200/2026-12-02-issue18/flaky
seq() {  # TAG FILE...
  local tag=$1; shift
  timeout 170 "$B" replay "$@" --backend cuda --case-timeout 120 \
    --worker-env PYTHONPATH=/tmp/recap-site-0.15.3:$PWD/drivers > "$o/flaky-$tag.txt" 2>&1
  echo "exit $?" >> "$o/flaky-$tag.txt"
}
seq alone $F/case-232.json &
seq after-227 $F/case-227.json $F/case-232.json &
seq after-231 $F/case-231.json $F/case-232.json &
seq after-225-231 $F/case-22[5-9].json $F/case-23[01].json $F/case-232.json &
seq twice $F/case-232.json $F/case-232.json &
for m in ckpt-input-grad-lost graph-warmup-mutates-params; do
  timeout 170 "$B" mutants --sut torch --backend cuda --cases 40 --seed 1 --shrink-limit 8 --case-timeout 120 \
    --known-findings corpus/known-findings/torch-2.11.json --worker-env "PYTHONPATH=$PWD/drivers" --mutant $m \
    --corpus-dir "$o/mut-$m" --report "$o/mutants-$m.json" > "$o/mutants-$m.log" 2>&1 &
done
wait
echo "[$(( $(date +%s) - t0 )) s] done"
for f in "$o"/flaky-*.txt; do echo "== $f"; grep -E "^replay .*case-232|^exit" "$f"; done
grep -h -E "killed|survived|baseline" "$o"/mutants-*.log
