set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_MEMORY_TRACE=1 RECAP_WORKER_STDERR=1 RECAP_CUDA_MEMORY_FRACTION=0.2
B=.device/slim/harness/cli/recap
v=0.19.2
pip install --no-deps --target /tmp/recap-site-$v .whl/megatron_core-$v-*.whl -q > /dev/null 2>&1
timeout -k 5 70 $B fuzz --sut megatron@$v --backend cuda --cases 30 --jobs 1 --seed 1 --shrink-limit 1 \
  --worker-env PYTHONPATH=/tmp/recap-site-$v:$PWD/drivers 2>&1 | grep -E "memory after case|after case|retire|out of memory|cases in" | cut -c1-260 > $OUT/mc.txt
