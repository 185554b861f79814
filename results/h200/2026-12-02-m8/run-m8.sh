#!/usr/bin/env bash
# M8 on the H200 (from the tree's root; .device and .whl carried): (1) m8_repro.py, megatron-core
# alone, on 0.15.3, 0.16.1, 0.17.1, 0.18.2, 0.19.2; (2) the flaky case 232 of the issue-18 campaign
# (results/h200/2026-12-02-issue18/flaky/case-232.json) replayed 12 times in one worker, first on
# an idle GPU, then with four processes of load.py keeping the GPU busy; (3) the two torch mutants
# whose committed reproducers had shrunk into F2's configuration, with this tree's reproducer rule.
set -u
. scripts/gpu-out.sh
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
B=$PWD/.device/slim/harness/cli/recap
D=results/h200/2026-12-02-m8
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; } > "$o/machine.txt" 2>&1
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$o/timeline.txt"; }
for v in 0.15.3 0.16.1 0.17.1 0.18.2 0.19.2; do
  pip install -q --no-deps --target /tmp/recap-site-$v .whl/megatron_core-$v-*.whl > "$o/pip-$v.log" 2>&1
done
stamp "installed"
for m in ckpt-input-grad-lost graph-warmup-mutates-params; do
  timeout 200 "$B" mutants --sut torch --backend cuda --cases 40 --seed 1 --shrink-limit 8 --case-timeout 120 \
    --known-findings corpus/known-findings/torch-2.11.json --worker-env "PYTHONPATH=$PWD/drivers" --mutant $m \
    --corpus-dir "$o/mut-$m" --report "$o/mutants-$m.json" > "$o/mutants-$m.log" 2>&1 &
done
for v in 0.15.3 0.16.1 0.17.1 0.18.2 0.19.2; do
  PYTHONPATH=/tmp/recap-site-$v timeout 60 python3 $D/m8_repro.py > "$o/m8-repro-$v.txt" 2>&1
  echo "exit $?" >> "$o/m8-repro-$v.txt"
done
stamp "reproducers done"
C=results/h200/2026-12-02-issue18/flaky/case-232.json
twelve=(); for i in $(seq 12); do twelve+=("$C"); done
timeout 150 "$B" replay "${twelve[@]}" --backend cuda --case-timeout 60 \
  --worker-env PYTHONPATH=/tmp/recap-site-0.15.3:$PWD/drivers > "$o/case232-idle.txt" 2>&1
echo "exit $?" >> "$o/case232-idle.txt"
stamp "idle replays done"
for i in 1 2 3 4; do timeout 200 python3 $D/load.py 150 > "$o/load-$i.txt" 2>&1 & done
sleep 10
timeout 150 "$B" replay "${twelve[@]}" --backend cuda --case-timeout 60 \
  --worker-env PYTHONPATH=/tmp/recap-site-0.15.3:$PWD/drivers --report "$o/case232-loaded.json" > "$o/case232-loaded.txt" 2>&1
echo "exit $?" >> "$o/case232-loaded.txt"
stamp "loaded replays done"
wait
stamp "all done"
for v in 0.15.3 0.16.1 0.17.1 0.18.2 0.19.2; do cat "$o/m8-repro-$v.txt"; done
for f in idle loaded; do echo "== $f: $(grep -c ': passed' "$o/case232-$f.txt") passed, $(grep -c ': incorrect' "$o/case232-$f.txt") incorrect"; grep -m2 "incorrect\|vs eager" "$o/case232-$f.txt"; done
grep -h -E "killed|survived|baseline|reproduce" "$o"/mutants-*.log | head -20
