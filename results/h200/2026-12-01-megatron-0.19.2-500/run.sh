#!/usr/bin/env bash
# The megatron@0.19.2 campaign of 500 cases alone on the H200 (the first one, beside two other
# campaigns, reached 450 in its budget), with the driver's per-case cuBLAS clearing and the memory
# oracle judged against the no-checkpoint twin; beside it, the drivers' GPU unit tests (torch, and
# megatron on both versions). From the tree's root, with .device/slim and .whl carried.
set -u
o=$(realpath -m "${OUT:-gpu-logs}")
mkdir -p "$o/tests"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1
for v in 0.15.3 0.19.2; do  # installed once, before the campaign and the tests both use them
  [ -d /tmp/recap-site-$v/megatron ] || pip install --no-deps --target /tmp/recap-site-$v \
    .whl/megatron_core-$v-*.whl $(python3 -c "import numpy" 2>/dev/null || ls .whl/numpy-*.whl) -q > "$o/pip-$v.log" 2>&1
done
( cd drivers
  RECAP_DRIVER_DEVICE=cuda OUT="$o/tests" timeout 300 python3 -m unittest -v tests.test_torch_gpu > "$o/tests/torch.log" 2>&1
  echo "rc $?" >> "$o/tests/torch.log"
  for v in 0.15.3 0.19.2; do
    OUT="$o/tests" PYTHONPATH=/tmp/recap-site-$v:$PWD timeout 200 python3 -m unittest -v tests.test_megatron_gpu > "$o/tests/mc$v.log" 2>&1
    echo "rc $?" >> "$o/tests/mc$v.log"
  done ) &
OUT="$o/c" CAMPAIGNS=megatron-0.19.2 BUDGET_megatron_0_19_2=330 LIMIT_megatron_0_19_2=420 SHRINK_LIMIT=12 \
  scripts/gpu-sut-campaigns.sh 500 5
wait
# memory each worker still held after a case (the driver prints it with RECAP_WORKER_STDERR=1)
grep -ho "[0-9]* MiB still allocated" "$o/c/megatron-0.19.2.log" | sort -n | awk '{n++; m=$1} END {print n " lines, max " m " MiB"}' > "$o/memory-held.txt"
tail -n 3 "$o"/tests/*.log
cat "$o/c/summary.txt" "$o/memory-held.txt"
tar czf /tmp/all.tgz -C "$o" . && rm -rf "${o:?}"/* && mv /tmp/all.tgz "$o/"
