#!/usr/bin/env bash
# Issue 18 on the H200, call A (from the tree's root; .device (the stripped gpu-preset recap) and
# .whl (megatron-core 0.15.3 and 0.19.2 wheels) carried): the drivers' GPU tests (every graphed
# layer captured and replayed, from the observation), the two-layer case of the issue through recap
# on megatron@0.15.3 (must fail as M2), and `recap mutants` on torch and megatron@0.19.2 with each
# framework's known findings accepted. Everything under $OUT, packed on every exit.
set -u
. scripts/gpu-out.sh
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
B=$PWD/.device/slim/harness/cli/recap
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; git log -1 --format=%H 2>/dev/null; } > "$o/machine.txt" 2>&1
for v in 0.15.3 0.19.2; do
  pip install -q --no-deps --target /tmp/recap-site-$v .whl/megatron_core-$v-*.whl > "$o/pip-$v.log" 2>&1
done
site() { echo "/tmp/recap-site-$1:$PWD/drivers"; }
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$o/timeline.txt"; }

stamp "driver GPU tests"
(cd drivers && OUT="$o" RECAP_BIN="$B" timeout 200 python3 -m unittest -v tests.test_torch_gpu) > "$o/torch-gpu.log" 2>&1 &
for v in 0.15.3 0.19.2; do
  mkdir -p "$o/mc$v"
  (cd drivers && OUT="$o/mc$v" PYTHONPATH="$(site $v)" timeout 200 python3 -m unittest -v tests.test_megatron_gpu) > "$o/megatron-gpu-$v.log" 2>&1 &
done
timeout 120 "$B" replay corpus/frameworks/megatron-0.15.3/ungraphed-first-layer-m2.json --backend cuda \
  --worker-env PYTHONPATH="$(site 0.15.3)" > "$o/two-layer-0.15.3.txt" 2>&1
echo "exit $?" >> "$o/two-layer-0.15.3.txt"
wait
stamp "driver GPU tests done"

# mutants: each framework's in parallel processes (one worker each; every process runs its own
# clean baseline first, with the framework's known findings accepted)
mut() {  # TAG SUT KNOWN PYTHONPATH MUTANT...
  local tag=$1 sut=$2 known=$3 pp=$4; shift 4
  local args=(); for m in "$@"; do args+=(--mutant "$m"); done
  timeout 330 "$B" mutants --sut "$sut" --backend cuda --cases "${MUT_CASES:-40}" --seed 1 --shrink-limit 8 \
    --case-timeout 120 --known-findings "$known" --worker-env "PYTHONPATH=$pp" "${args[@]}" \
    --corpus-dir "$o/mut-$tag" --report "$o/mutants-$tag.json" > "$o/mutants-$tag.log" 2>&1
  echo "exit $?" >> "$o/mutants-$tag.log"
}
kt=corpus/known-findings/torch-2.11.json k19=corpus/known-findings/megatron-0.19.2.json
stamp "mutants"
mut t1 torch $kt "$PWD/drivers" graph-replay-skipped graph-replay-rng-frozen graph-static-input-stale &
mut t2 torch $kt "$PWD/drivers" graph-warmup-mutates-params ckpt-cpu-rng-only ckpt-no-rng-preserve &
mut t3 torch $kt "$PWD/drivers" ckpt-recompute-fresh-generator ckpt-recompute-offset-shift ckpt-param-grad-lost &
M19=$(python3 -c 'import sys; sys.path.insert(0, "drivers"); from recap_drivers import mutants as m; print(" ".join(x.name for x in m.for_sut("megatron")))')
echo "megatron mutants: $M19" >> "$o/timeline.txt"
set -- $M19
half=$(( ($# + 1) / 2 ))
mut m1 megatron@0.19.2 $k19 "$(site 0.19.2)" "${@:1:$half}" &
mut m2 megatron@0.19.2 $k19 "$(site 0.19.2)" "${@:$((half + 1))}" &
wait
stamp "mutants done"
tail -n 4 "$o"/torch-gpu.log "$o"/megatron-gpu-*.log
cat "$o/two-layer-0.15.3.txt" | head -5
grep -h -E "killed|survived|not exercised|baseline" "$o"/mutants-*.log
