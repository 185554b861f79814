# replays of the campaigns' corpus files with retiring workers, and where the memory held across cases comes from
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 RECAP_WORKER_STDERR=1 RECAP_LEAK_REPORT=300 OMP_NUM_THREADS=1
B=.device/slim/harness/cli/recap
o=$OUT/v; mkdir -p $o
for v in 0.15.3 0.19.2; do
  [ -d /tmp/recap-site-$v/megatron ] || pip install --no-deps --target /tmp/recap-site-$v .whl/megatron_core-$v-*.whl -q > $o/pip-$v.log 2>&1
  ( timeout 280 $B replay .device/corpus/corpus-megatron-$v/*.json --backend cuda --require-memory-savings --case-timeout 120 \
      --worker-env PYTHONPATH=/tmp/recap-site-$v:$PWD/drivers --report $o/replay-$v.json > $o/replay-$v.log 2>&1; echo "replay $v exit $?" >> $o/rc.txt ) &
done
( timeout 280 $B replay .device/corpus/corpus-torch/*.json --backend cuda --require-memory-savings --case-timeout 120 \
    --worker-env PYTHONPATH=$PWD/drivers --report $o/replay-torch.json > $o/replay-torch.log 2>&1; echo "replay torch exit $?" >> $o/rc.txt
  timeout 120 $B fuzz --sut torch --backend cuda --cases 100 --seed 1 --no-checkpoint --no-dropout --worker-env PYTHONPATH=$PWD/drivers --report $o/leak-torch.json > $o/leak-torch.log 2>&1; echo "leak torch exit $?" >> $o/rc.txt ) &
wait
cat $o/rc.txt; for f in $o/replay-*.log; do echo "== $f"; tail -n 2 $f; done; grep -h -A12 "leak report" $o/*.log | head -60
cd $OUT && tar czf v.tgz v && rm -rf v
