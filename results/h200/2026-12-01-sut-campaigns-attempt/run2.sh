export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p $OUT/c
BUDGET_torch=35 LIMIT_torch=75 BUDGET_torch_no_ckpt_no_dropout=25 LIMIT_torch_no_ckpt_no_dropout=55 \
BUDGET_megatron_0_15_3=45 LIMIT_megatron_0_15_3=95 BUDGET_megatron_0_19_2=45 LIMIT_megatron_0_19_2=95 SHRINK_LIMIT=30 \
  OUT=$OUT/c timeout 330 scripts/gpu-sut-campaigns.sh 500 14 > $OUT/c/run.log 2>&1
echo "script exit $?" >> $OUT/c/run.log
cd $OUT && tar czf c.tgz c && ls -la c.tgz
