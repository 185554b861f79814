#!/usr/bin/env bash
# Issue 20, point 2: the campaigns of the megatron-core versions recap had not run (0.16.1, 0.17.1,
# 0.18.2) and of Megatron-LM main (a checkout carried as source in .device/megatron-main), 500
# cases each, seed 1, all at once (JOBS workers each). Each is judged by the known findings of the
# release before it that recap has a file for (0.15.3's for 0.16.1 and 0.17.1, which still have
# no PR #3919 skip; 0.19.2's for 0.18.2 and main), so what a version adds shows as new buckets;
# once a version has its own file (corpus/known-findings/megatron-<V>.json), by that.
#   RECAP_GIT_COMMIT=<sha> bash results/h200/2026-12-02-issue20/run-campaigns.sh   (there, from the root)
# The controls (no checkpoints, no dropout: graphs alone), 300 cases of every version:
#   VERSIONS="0.15.3 0.16.1 0.17.1 0.18.2 0.19.2 main" SUFFIX=-control CASES=300 JOBS=2 bash ...
set -u
. scripts/gpu-out.sh
t0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_WORKER_RETIRE_MIB=192
export RECAP_BIN=$PWD/.device/slim/harness/cli/recap
B=${BUDGET:-270} L=${LIMIT:-330} J=${JOBS:-4} N=${CASES:-500}
{ nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__)'; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc; } > "$o/machine.txt" 2>&1
common=(SHRINK_LIMIT=12 CHUNK_CASES=25 REPLAY_DEADLINE=$(( t0 + 400 )))
for v in ${VERSIONS:-0.16.1 0.17.1 0.18.2 main}; do
  n=megatron-$v${SUFFIX:-}; u=${n//[.-]/_}
  known=corpus/known-findings/megatron-$v.json  # its own file once triaged, else the one before it
  if [ ! -f "$known" ]; then
    case $v in 0.16.*|0.17.*) known=corpus/known-findings/megatron-0.15.3.json ;; *) known=corpus/known-findings/megatron-0.19.2.json ;; esac
  fi
  env OUT="$o/$v" CAMPAIGNS=$n "BUDGET_$u=$B" "LIMIT_$u=$L" "KNOWN_$u=$known" "${common[@]}" \
    scripts/gpu-sut-campaigns.sh "$N" "$J" &
done
# recap's kept megatron findings (corpus/frameworks/megatron-0.15.3 and -0.19.2), each file
# replayed on every version here: what each finding does on the versions in between and on main
# (a file whose policy the version does not run is skipped with the driver's reason)
if [ "${CROSS_REPLAY:-1}" = 1 ] && [ -z "${SUFFIX:-}" ]; then
  for v in ${VERSIONS:-0.16.1 0.17.1 0.18.2 main}; do
    (
      if [ "$v" = main ]; then s=megatron py="$PWD/.device/megatron-main:$PWD/drivers"
      else s=megatron@$v py="/tmp/recap-site-$v:$PWD/drivers"
        while [ ! -d /tmp/recap-site-$v/megatron ] && [ "$(date +%s)" -lt $(( t0 + 300 )) ]; do sleep 2; done; sleep 5  # the campaign installs it
      fi
      timeout $(( t0 + 400 - $(date +%s) )) "$RECAP_BIN" replay corpus/frameworks/megatron-0.15.3/*.json \
        corpus/frameworks/megatron-0.19.2/*.json --sut "$s" --backend cuda --require-memory-savings --case-timeout 120 \
        --worker-env "PYTHONPATH=$py" --report "$o/cross-replay-$v.json" > "$o/cross-replay-$v.log" 2>&1
      echo "cross replay on $v: exit $?; $(tail -n 1 "$o/cross-replay-$v.log")" >> "$o/cross-summary.txt"
    ) &
  done
fi
wait
cat "$o"/cross-summary.txt 2>/dev/null
cat "$o"/*/summary.txt | grep -v "reproduce:" | tail -n 80
