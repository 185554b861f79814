set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
python3 -c "import numpy; print('numpy', numpy.__version__)" > $OUT/env.log 2>&1 || NEED_NUMPY=1
for v in 0.15.3 0.19.2; do
  pip install --no-deps --target /tmp/mc$v .whl/megatron_core-$v-*.whl ${NEED_NUMPY:+.whl/numpy-*.whl} -q >> $OUT/env.log 2>&1
done
nvidia-smi --query-gpu=name,memory.used --format=csv >> $OUT/env.log
cd drivers
for v in 0.15.3 0.19.2; do
  OUT=$OUT PYTHONPATH=/tmp/mc$v:$PWD timeout 230 python3 -m unittest -v tests.test_megatron_gpu > $OUT/mc$v.log 2>&1; echo "rc $?" >> $OUT/mc$v.log
done
true
cd $OUT && tar czf logs.tgz *.log *.json 2>/dev/null; ls -la $OUT
