#!/usr/bin/env bash
# Issue 20, points 2 and 4 on the H200 (from the tree's root; .device and .whl carried), all at once:
#  - the controls: 300 cases of every version without checkpoints and dropout (graphs alone), by
#    its own known findings (-control campaigns of scripts/gpu-sut-campaigns.sh, 1 job each);
#  - the upgrade gate: `recap gate` of every version with its own known findings (must pass), and
#    of every version with the known findings of the one before it (must fail with exactly the
#    buckets it adds, and list the findings that no longer occur). GATE_CASES generated cases each
#    (seed 1, GATE_JOBS jobs), the version's corpus/frameworks/megatron-<V>/ replayed first. Coverage is
#    not checked: its requirements are recap's runtime's.
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-02-issue20/run-gates.sh
set -u
. scripts/gpu-out.sh
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_WORKER_RETIRE_MIB=192 PYTHONUNBUFFERED=1
export RECAP_CUDA_MEMORY_FRACTION=0.04
export RECAP_BIN=$PWD/.device/slim/harness/cli/recap
V=(${VERSIONS:-0.15.3 0.16.1 0.17.1 0.18.2 0.19.2 main})
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc; } > "$o/machine.txt" 2>&1
site() {  # the PYTHONPATH of a version's worker
  if [ "$1" = main ]; then echo "$PWD/.device/megatron-main:$PWD/drivers"; return; fi
  local d=/tmp/recap-site-$1
  [ -d "$d/megatron" ] || pip install -q --no-deps --target "$d" .whl/megatron_core-"$1"-*.whl >> "$o/pip.log" 2>&1
  echo "$d:$PWD/drivers"
}
sut() { [ "$1" = main ] && echo megatron || echo "megatron@$1"; }
for v in "${V[@]}"; do site "$v" > /dev/null; done  # installed once, before anything runs in parallel
if [ "${CONTROLS:-1}" = 1 ]; then
  for v in "${V[@]}"; do
    n=megatron-$v-control; u=${n//[.-]/_}
    env OUT="$o/control-$v" CAMPAIGNS=$n "BUDGET_$u=${BUDGET:-420}" "LIMIT_$u=${LIMIT:-470}" \
      "KNOWN_$u=corpus/known-findings/megatron-$v.json" SHRINK_LIMIT=8 CHUNK_CASES=25 \
      REPLAY_DEADLINE=$(( t0 + 540 )) scripts/gpu-sut-campaigns.sh "${CONTROL_CASES:-300}" 1 > /dev/null 2>&1 &
  done
fi
gate() {  # TAG VERSION KNOWN-VERSION
  local tag=$1 v=$2 k=$3 s rc
  s=$(date +%s)
  timeout "${GATE_LIMIT:-480}" "$RECAP_BIN" gate --sut "$(sut "$v")" --backend cuda --corpus "corpus/frameworks/megatron-$v" \
    --known-findings "corpus/known-findings/megatron-$k.json" --cases "${GATE_CASES:-100}" --seed 1 --jobs "${GATE_JOBS:-1}" --no-coverage \
    --shrink-limit 8 --case-timeout 120 --worker-env "PYTHONPATH=$(site "$v")" --corpus-dir "$o/gate-$tag" \
    --report "$o/gate-$tag.json" > "$o/gate-$tag.log" 2>&1
  rc=$?
  echo "gate $tag (--sut $(sut "$v") --known-findings megatron-$k.json): exit $rc, $(( $(date +%s) - s )) s: $(grep '^recap gate:' "$o/gate-$tag.log" | tail -n 1)" >> "$o/summary.txt"
}
prev=""
for v in "${V[@]}"; do
  gate "$v" "$v" "$v" &
  [ -n "$prev" ] && gate "$v-by-$prev" "$v" "$prev" &
  prev=$v
done
wait
echo "[$(( $(date +%s) - t0 )) s] done" >> "$o/summary.txt"
sort "$o/summary.txt"; cat "$o"/control-*/summary.txt 2>/dev/null | grep -v "reproduce:"
