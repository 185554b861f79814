#!/usr/bin/env bash
# Issue 18's last acceptance point, literally, on the H200 (from the tree's root; .device and .whl
# carried): every framework mutant killed by `recap gate --known-findings` with every known finding
# of its framework accepted, after the same gate passes without a mutant. One gate per mutant, all
# at once: torch (policy naive, its only one) and megatron@0.19.2 (policy skip, PR #3919's), 60
# cases each (seed 1), the SUT's corpus/frameworks/<sut>/ replayed first; coverage is not checked
# (60 cases cannot meet the gate's coverage requirements, which are not what this shows).
set -u
. scripts/gpu-out.sh
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_CUDA_MEMORY_FRACTION=0.03
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; } > "$o/machine.txt" 2>&1
pip install -q --no-deps --target /tmp/recap-site-0.19.2 .whl/megatron_core-0.19.2-*.whl > "$o/pip.log" 2>&1
gate() {  # TAG SUT POLICY KNOWN-AND-CORPUS-NAME PYTHONPATH MUTANT
  local tag=$1 sut=$2 pol=$3 name=$4 py=$5 m=$6 s rc
  local env=(--worker-env "PYTHONPATH=$py")
  [ -n "$m" ] && env+=(--worker-env "RECAP_FRAMEWORK_MUTANT=$m")
  s=$(date +%s)
  timeout 400 "$B" gate --sut "$sut" --backend cuda --policy "$pol" --corpus "corpus/frameworks/$name" \
    --known-findings "corpus/known-findings/$name.json" --cases 60 --seed 1 --no-coverage --no-require-memory-savings \
    --shrink-limit 8 --case-timeout 120 "${env[@]}" --corpus-dir "$o/found-$tag" --report "$o/gate-$tag.json" \
    > "$o/gate-$tag.log" 2>&1
  rc=$?
  echo "$tag: exit $rc, $(( $(date +%s) - s )) s: $(grep '^recap gate:' "$o/gate-$tag.log" | tail -n 1)" >> "$o/summary.txt"
}
T="ckpt-no-rng-preserve ckpt-recompute-fresh-generator ckpt-recompute-offset-shift ckpt-param-grad-lost ckpt-cpu-rng-only graph-replay-skipped graph-replay-rng-frozen graph-static-input-stale graph-warmup-mutates-params ckpt-input-grad-lost"
M="graph-replay-skipped graph-replay-rng-frozen mcore-tracker-not-restored mcore-cuda-rng-not-restored mcore-param-grad-lost mcore-recompute-offset-shift mcore-tracker-states-live mcore-recompute-default-generator mcore-fork-not-advancing mcore-input-grad-lost mcore-grad-buffer-not-zeroed"
gate torch-baseline torch naive torch-2.11 "$PWD/drivers" "" &
gate m19-baseline megatron@0.19.2 skip megatron-0.19.2 "/tmp/recap-site-0.19.2:$PWD/drivers" "" &
for m in $T; do gate "torch-$m" torch naive torch-2.11 "$PWD/drivers" "$m" & done
for m in $M; do gate "m19-$m" megatron@0.19.2 skip megatron-0.19.2 "/tmp/recap-site-0.19.2:$PWD/drivers" "$m" & done
wait
echo "[$(( $(date +%s) - t0 )) s] done" >> "$o/summary.txt"
sort "$o/summary.txt"
