#!/usr/bin/env bash
# Issue 18 on the H200, call C: the framework mutants call A left unfinished (its megatron
# processes ran past their 330 s limit: 40-case baselines and a surviving candidate take minutes on
# megatron) and the torch mutant it did not list, in more parallel processes (each its own clean
# baseline, known findings accepted). Same flags as run-a.sh.
set -u
. scripts/gpu-out.sh
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
B=$PWD/.device/slim/harness/cli/recap
pip install -q --no-deps --target /tmp/recap-site-0.19.2 .whl/megatron_core-0.19.2-*.whl > "$o/pip.log" 2>&1
mut() {  # TAG SUT KNOWN PYTHONPATH MUTANT...
  local tag=$1 sut=$2 known=$3 pp=$4; shift 4
  local args=(); for m in "$@"; do args+=(--mutant "$m"); done
  timeout "${MUT_LIMIT:-400}" "$B" mutants --sut "$sut" --backend cuda --cases "${MUT_CASES:-40}" --seed 1 --shrink-limit 8 \
    --case-timeout 120 --known-findings "$known" --worker-env "PYTHONPATH=$pp" "${args[@]}" \
    --corpus-dir "$o/mut-$tag" --report "$o/mutants-$tag.json" > "$o/mutants-$tag.log" 2>&1
  echo "exit $?" >> "$o/mutants-$tag.log"
}
k19=corpus/known-findings/megatron-0.19.2.json s19=/tmp/recap-site-0.19.2:$PWD/drivers
mut t4 torch corpus/known-findings/torch-2.11.json "$PWD/drivers" ckpt-input-grad-lost &
mut c1 megatron@0.19.2 $k19 "$s19" mcore-tracker-not-restored &
mut c2 megatron@0.19.2 $k19 "$s19" mcore-cuda-rng-not-restored mcore-param-grad-lost &
mut c3 megatron@0.19.2 $k19 "$s19" mcore-recompute-offset-shift mcore-fork-not-advancing &
mut c4 megatron@0.19.2 $k19 "$s19" mcore-input-grad-lost mcore-grad-buffer-not-zeroed &
wait
echo "[$(( $(date +%s) - t0 )) s] done"
grep -h -E "killed|survived|not exercised|baseline|exit" "$o"/mutants-*.log
