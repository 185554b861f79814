export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p $OUT/c
(cd drivers && PYTHONPATH=$PWD timeout 60 python3 benchmarks/observe_overhead.py > $OUT/c/overhead.json 2>$OUT/c/overhead.err)
BUDGET_torch=70 BUDGET_torch_no_ckpt_no_dropout=45 BUDGET_megatron_0_15_3=110 BUDGET_megatron_0_19_2=110 \
  OUT=$OUT/c timeout 480 scripts/gpu-sut-campaigns.sh 500 12 > $OUT/c/run.log 2>&1
echo "script exit $?" >> $OUT/c/run.log
cd $OUT && tar czf c.tgz c && ls -la c.tgz
