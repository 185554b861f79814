#!/usr/bin/env bash
# Issue 21, session 8, third H200 call, in the device time left (about 400 s held): recap's runtime
# on cuda, graph-safe, 16 jobs, --profile, 25 s of cases, after uploads stopped synchronizing the
# device one by one (runtime::Settle): block cache off, then on. Does `sync` stop dominating?
#   RECAP_GIT_COMMIT=<sha> [CACHES="0 1"] bash results/h200/2026-12-03-issue21-s8/run3.sh
set -u
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_CORPUS_DIR=$PWD/corpus
B=$PWD/.device/slim/harness/cli/recap
echo "commit ${RECAP_GIT_COMMIT:-?}" > "$o/machine.txt"
for c in ${CACHES:-0 1}; do
  RECAP_CUDA_BLOCK_CACHE=$c timeout -k 10 45 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 3000 --seed 1 --jobs 16 \
    --chunk-cases 5 --time-budget 25 --shrink-limit 4 --corpus-dir "$o/c$c" --report "$o/recap-cache$c.json" > "$o/recap-cache$c.log" 2>&1
  echo "exit $?" >> "$o/recap-cache$c.log"
  echo "== cache $c"; grep -E "cases/min|by disposition|exit" "$o/recap-cache$c.log"
  sed -n '/profile (/,$p' "$o/recap-cache$c.log" | grep -E "^    case |model_build|eager_steps|sync \(|alloc \("
done
