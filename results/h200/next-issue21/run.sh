#!/usr/bin/env bash
# Issue 21's next device calls, prepared (from the tree's root; .device and .whl carried). One mode
# per call, each ending within CALL_S seconds (default 540):
#   scaling        recap's runtime, graph-safe, 20 s of cases at --jobs 1, 4, 8 and 16, block cache
#                  off and on: how the rate scales with processes on one time-sliced GPU
#   quick          recap's runtime with the block cache at --jobs 1, 4, 16 (20 s each), torch 45 s at 16 jobs
#   campaign [I/N] the 2,000-case fixed-seed campaign (seed 1, graph-safe; shard I of N, default all;
#                  `recap merge` of shard reports gives the one-run report), then the naive policy on
#                  200 cases (found and shrunk) and the 520-case differential against sim
#   differential I/N  shard I of N of the 520-case differential against sim (small tensors)
#   rates          torch and megatron@0.19.2 --no-checkpoint, 16 jobs, 120 s of cases each
#   checks         recap mutants --backend cuda --fault cuda-dropout-offset; compute-sanitizer, every tool
#   final          the GPU models tests, the 2,000-case campaign, naive on 200 cases, the 520-case
#                  differential, torch and megatron@0.19.2 --no-checkpoint rates (RATE_S s each)
#   initcheck      the case initcheck reported (cases/initcheck-bf16-per-layer.json) alone under initcheck,
#                  three ways: as before, --check-bulk-copy yes, RECAP_GEMM=simple
#   poison         that case with cuBLAS's outputs pre-filled with NaN (and the control), then the
#                  initcheck campaign with the poison and with RECAP_GEMM=simple
#   testsinit      the six GPU test binaries under initcheck (cuBLAS's outputs poisoned)
#   last           the differential, torch's rate without --profile, then checks
#   verify         the warp-per-row kernels (models/ops.cu): models_gpu_test, the large cases of cases/
#                  replayed with --profile, the rate at 1 to 16 jobs (VERIFY_JOBS="jobs:chunk ...")
#   kernels        the large cases of cases/ (session 10's slowest) replayed with --profile, then under
#                  ncu (gpu__time_duration per kernel, graph nodes included), summed by ncu_summary.py
#   RECAP_GIT_COMMIT=<sha> bash results/h200/next-issue21/run.sh campaign 0/4
set -u
. scripts/gpu-call.sh  # $o, $B, CALL_S, left(), machine.txt
summary() { for f in "$o"/*.log; do echo "== $(basename "$f")"; grep -E "cases/min|by disposition|no failure|exit|interrupted" "$f" | head -5
  sed -n '/profile (/,$p' "$f" | grep -E "^    case |sync \(|alloc \(|h2d \(|determinism"; done; }
case ${1:-} in
  scaling)
    for j in 1 4 8 16; do for c in 0 1; do
      [ "$(left)" -gt 45 ] || break 2
      RECAP_CUDA_BLOCK_CACHE=$c timeout -k 10 35 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 3000 --seed 1 \
        --jobs $j --chunk-cases 2 --time-budget 20 --shrink-limit 4 --corpus-dir "$o/c" --report "$o/j$j-cache$c.json" \
        > "$o/j$j-cache$c.log" 2>&1; echo "exit $?" >> "$o/j$j-cache$c.log"
    done; done ;;
  quick)  # what a short call can tell: the block cache with Settle at 1, 4 and 16 jobs; torch after c989c1d
    for j in ${QUICK_JOBS:-1 4 16}; do
      RECAP_CUDA_BLOCK_CACHE=1 timeout -k 10 35 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 3000 --seed 1 \
        --jobs $j --chunk-cases 2 --time-budget 20 --shrink-limit 4 --corpus-dir "$o/c" --report "$o/j$j-cache1.json" \
        > "$o/j$j-cache1.log" 2>&1; echo "exit $?" >> "$o/j$j-cache1.log"
    done
    timeout -k 20 $(( ${QUICK_TORCH_S:-45} + 30 )) "$B" fuzz --backend cuda --sut torch --profile --cases 30000 --seed 1 --jobs 16 --chunk-cases 10 \
      --time-budget ${QUICK_TORCH_S:-45} --shrink-limit 4 --known-findings corpus/known-findings/torch-2.11.json --worker-env "PYTHONPATH=$PWD/drivers" \
      --corpus-dir "$o/c-torch" --report "$o/torch.json" > "$o/torch.log" 2>&1; echo "exit $?" >> "$o/torch.log" ;;
  campaign)  # the 2,000-case campaign at 16 jobs (I/N: shard I of N), then the naive policy found and shrunk
    S=${2:-0/1}
    timeout -k 30 $(( ${CAMPAIGN_S:-300} )) "$B" fuzz --backend cuda --policy graph-safe --profile --cases 2000 --seed 1 --jobs 16 \
      --chunk-cases 5 --shard "$S" --shrink-limit 20 --corpus-dir "$o/corpus" --report "$o/campaign-${S/\//-of-}.json" \
      > "$o/campaign.log" 2>&1; echo "exit $?" >> "$o/campaign.log"
    timeout -k 30 $(( $(left) / 3 )) "$B" fuzz --backend cuda --policy naive --cases 200 --seed 1 --jobs 16 --chunk-cases 5 \
      --shrink-limit 40 --corpus-dir "$o/naive-corpus" --report "$o/naive.json" > "$o/naive.log" 2>&1; echo "exit $?" >> "$o/naive.log"
    timeout -k 30 $(( $(left) - 20 )) "$B" fuzz --backend cuda --policy graph-safe --differential sim --dims small --cases 520 \
      --seed 1 --jobs 16 --chunk-cases 5 --shrink-limit 5 --corpus-dir "$o/diff-corpus" \
      --report "$o/differential.json" > "$o/differential.log" 2>&1; echo "exit $?" >> "$o/differential.log" ;;
  differential)
    timeout -k 30 $(( $(left) - 30 )) "$B" fuzz --backend cuda --policy graph-safe --differential sim --dims small --cases 520 \
      --seed 1 --jobs 16 --chunk-cases 5 --shard "$2" --shrink-limit 5 --corpus-dir "$o/corpus" \
      --report "$o/differential-${2/\//-of-}.json" > "$o/differential.log" 2>&1; echo "exit $?" >> "$o/differential.log" ;;
  rates)
    pip install -q --no-deps --target /tmp/recap-site-0.19.2 .whl/megatron_core-0.19.2-*.whl > /dev/null 2>&1
    timeout -k 20 150 "$B" fuzz --backend cuda --sut torch --profile --cases 30000 --seed 1 --jobs 16 --chunk-cases 10 \
      --time-budget 120 --shrink-limit 4 --known-findings corpus/known-findings/torch-2.11.json --worker-env "PYTHONPATH=$PWD/drivers" \
      --corpus-dir "$o/c-torch" --report "$o/torch.json" > "$o/torch.log" 2>&1; echo "exit $?" >> "$o/torch.log"
    timeout -k 20 150 "$B" fuzz --backend cuda --sut megatron@0.19.2 --no-checkpoint --profile --cases 30000 --seed 1 --jobs 16 \
      --chunk-cases 10 --time-budget 120 --shrink-limit 4 --known-findings corpus/known-findings/megatron-0.19.2.json \
      --worker-env "PYTHONPATH=/tmp/recap-site-0.19.2:$PWD/drivers" --corpus-dir "$o/c-mcore" --report "$o/mcore.json" \
      > "$o/mcore.log" 2>&1; echo "exit $?" >> "$o/mcore.log" ;;
  kernels)  # where the large cases' GPU time goes, kernel by kernel (results/h200/2026-12-03-issue21-s10)
    for f in results/h200/next-issue21/cases/*.json; do n=$(basename "$f" .json)
      timeout -k 10 60 "$B" replay "$f" --backend cuda --profile > "$o/$n-replay.log" 2>&1; echo "exit $?" >> "$o/$n-replay.log"
      timeout -k 10 $(( $(left) / 2 )) ncu --clock-control none --graph-profiling node --metrics gpu__time_duration.sum --csv \
        --log-file "$o/$n-ncu.csv" "$B" replay "$f" --backend cuda > "$o/$n-ncu.log" 2>&1; echo "exit $?" >> "$o/$n-ncu.log"
    done
    python3 results/h200/next-issue21/ncu_summary.py "$o"/*-ncu.csv > "$o/kernels.txt" 2>&1; cat "$o/kernels.txt" ;;
  verify)  # the warp-per-row kernels on main: models_gpu_test, the large cases, the rate by jobs and chunk size
    T=$PWD/.device/slim/tests/models/models_gpu_test
    timeout -k 10 150 "$T" > "$o/models_gpu_test.log" 2>&1; echo "exit $?" >> "$o/models_gpu_test.log"
    for f in results/h200/next-issue21/cases/*.json; do n=$(basename "$f" .json)
      timeout -k 10 40 "$B" replay "$f" --backend cuda --profile > "$o/$n.log" 2>&1; echo "exit $?" >> "$o/$n.log"
    done
    for jc in ${VERIFY_JOBS:-1:10 4:10 8:10 16:10 16:25}; do j=${jc%%:*}; c=${jc#*:}
      [ "$(left)" -gt 45 ] || break
      RECAP_CUDA_BLOCK_CACHE=1 timeout -k 10 40 "$B" fuzz --backend cuda --policy graph-safe --profile --cases 30000 --seed 1 \
        --jobs $j --chunk-cases $c --time-budget 25 --shrink-limit 4 --corpus-dir "$o/c" --report "$o/j$j-c$c.json" \
        > "$o/j$j-c$c.log" 2>&1; echo "exit $?" >> "$o/j$j-c$c.log"
    done
    tail -n 3 "$o/models_gpu_test.log" ;;
  final)  # issue 21's acceptance runs that fit one call: the GPU models tests, the 2,000-case campaign,
          # the naive policy, the 520-case differential, then torch and megatron@0.19.2 rates (RATE_S each)
    T=$PWD/.device/slim/tests/models/models_gpu_test
    timeout -k 10 100 "$T" > "$o/models_gpu_test.log" 2>&1; echo "exit $?" >> "$o/models_gpu_test.log"
    timeout -k 30 ${CAMPAIGN_S:-200} "$B" fuzz --backend cuda --policy graph-safe --profile --cases 2000 --seed 1 --jobs 16 \
      --chunk-cases 5 --shrink-limit 20 --corpus-dir "$o/corpus" --report "$o/campaign.json" > "$o/campaign.log" 2>&1
    echo "exit $?" >> "$o/campaign.log"
    timeout -k 30 60 "$B" fuzz --backend cuda --policy naive --cases 200 --seed 1 --jobs 16 --chunk-cases 5 \
      --shrink-limit 40 --corpus-dir "$o/naive-corpus" --report "$o/naive.json" > "$o/naive.log" 2>&1; echo "exit $?" >> "$o/naive.log"
    timeout -k 30 60 "$B" fuzz --backend cuda --policy graph-safe --differential sim --dims small --cases 520 \
      --seed 1 --jobs 16 --chunk-cases 5 --shrink-limit 5 --corpus-dir "$o/diff-corpus" \
      --report "$o/differential.json" > "$o/differential.log" 2>&1; echo "exit $?" >> "$o/differential.log"
    pip install -q --no-deps --target /tmp/recap-site-0.19.2 .whl/megatron_core-0.19.2-*.whl > /dev/null 2>&1
    R=${RATE_S:-100}
    [ "$(left)" -gt $(( R + 40 )) ] && { timeout -k 20 $(( R + 30 )) "$B" fuzz --backend cuda --sut torch --profile --cases 30000 \
      --seed 1 --jobs 16 --chunk-cases 10 --time-budget $R --shrink-limit 4 --known-findings corpus/known-findings/torch-2.11.json \
      --worker-env "PYTHONPATH=$PWD/drivers" --corpus-dir "$o/c-torch" --report "$o/torch.json" > "$o/torch.log" 2>&1
      echo "exit $?" >> "$o/torch.log"; }
    [ "$(left)" -gt $(( R + 40 )) ] && { timeout -k 20 $(( R + 30 )) "$B" fuzz --backend cuda --sut megatron@0.19.2 --no-checkpoint \
      --profile --cases 30000 --seed 1 --jobs 16 --chunk-cases 10 --time-budget $R --shrink-limit 4 \
      --known-findings corpus/known-findings/megatron-0.19.2.json --worker-env "PYTHONPATH=/tmp/recap-site-0.19.2:$PWD/drivers" \
      --corpus-dir "$o/c-mcore" --report "$o/mcore.json" > "$o/mcore.log" 2>&1; echo "exit $?" >> "$o/mcore.log"; }
    tail -n 3 "$o/models_gpu_test.log" ;;
  last)  # the differential again (bf16 bound per step), torch's rate without --profile (the driver's
         # profiling adds synchronizations), then `checks`
    timeout -k 30 60 "$B" fuzz --backend cuda --policy graph-safe --differential sim --dims small --cases 520 \
      --seed 1 --jobs 16 --chunk-cases 5 --shrink-limit 5 --corpus-dir "$o/diff-corpus" \
      --report "$o/differential.json" > "$o/differential.log" 2>&1; echo "exit $?" >> "$o/differential.log"
    R=${RATE_S:-90}
    timeout -k 20 $(( R + 40 )) "$B" fuzz --backend cuda --sut torch --cases 30000 --seed 1 --jobs 16 --chunk-cases 10 \
      --time-budget $R --shrink-limit 4 --known-findings corpus/known-findings/torch-2.11.json \
      --worker-env "PYTHONPATH=$PWD/drivers" --corpus-dir "$o/c-torch" --report "$o/torch.json" > "$o/torch.log" 2>&1
    echo "exit $?" >> "$o/torch.log"
    CALL_S=$(( CALL_S - SECONDS )) bash "$0" checks ;;  # packed by this shell (gpu-out.sh)
  initcheck)  # the open point: the case initcheck reported, alone, three ways, with named host frames
               # (carry a recap stripped with `strip --strip-debug` as .device/symbols/recap):
               #   default     as call 7 of session 11 ran it
               #   bulk-copy   --check-bulk-copy yes: initcheck follows TMA bulk copies (cuBLAS's Hopper
               #               kernels may store C with them; without it their writes are not seen)
               #   simple      RECAP_GEMM=simple: recap's own GEMM kernel instead of cuBLAS
               # reads only in default: initcheck's blind spot for TMA stores; in default and simple:
               # recap's own kernels; in default and bulk-copy but not simple: cuBLAS's writes
    S=$PWD/.device/symbols/recap; [ -x "$S" ] || S=$B
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    each=$(( ($(left) - 30) / 4 ))  # a quarter each: the last for the campaign that follows a clean bulk-copy run
    for v in default bulk-copy simple; do
      extra=(); envs=(RECAP_CUDA_BLOCK_CACHE=0)
      [ $v = bulk-copy ] && extra=(--check-bulk-copy yes)
      [ $v = simple ] && envs+=(RECAP_GEMM=simple)
      env "${envs[@]}" timeout -k 10 $each "$cs" --tool initcheck --report-api-errors no --print-limit 20 "${extra[@]}" \
        --error-exitcode 99 "$S" replay results/h200/next-issue21/cases/initcheck-bf16-per-layer.json --backend cuda \
        > "$o/initcheck-$v.log" 2>&1; echo "exit $?" >> "$o/initcheck-$v.log"
      echo "== $v: $(grep -E "ERROR SUMMARY|^exit" "$o/initcheck-$v.log" | tr '\n' ' ')"
    done
    # bulk-copy clean where default was not: initcheck's blind spot. Then the acceptance run in the
    # same call, with the time left: the 2-case campaign under initcheck following bulk copies.
    if grep -q "ERROR SUMMARY: 0 errors" "$o/initcheck-bulk-copy.log" && [ "$(left)" -gt 150 ]; then
      RECAP_BUILD=.device/slim OUT="$o/sanitizer" SANITIZER_TOOLS=initcheck SANITIZER_TESTS=none SANITIZER_DIMS=small \
        SANITIZER_ARGS="--check-bulk-copy yes" SANITIZER_TIMEOUT=$(( $(left) - 40 )) \
        timeout -k 10 $(( $(left) - 20 )) bash scripts/gpu-sanitizer.sh 2 > "$o/sanitizer.log" 2>&1
      echo "exit $?" >> "$o/sanitizer.log"; cat "$o/sanitizer/summary.txt" 2>/dev/null
    fi ;;
  poison)  # session 15's initcheck call: 378,475 reports alone, the same with --check-bulk-copy yes, none
            # with RECAP_GEMM=simple. Whether cuBLAS writes every element initcheck calls unwritten:
            # RECAP_GEMM_POISON=1 fills C with NaN before each cuBLAS call that overwrites it (the case
            # must still pass: every element read downstream was written), =after fills it after
            # (the control: the case must fail). Then the acceptance runs, the fixed-seed campaign
            # under initcheck (POISON_CASES cases) with the poison (cuBLAS kept) and with RECAP_GEMM=simple.
    c=results/h200/next-issue21/cases/initcheck-bf16-per-layer.json
    for v in 1 after; do
      RECAP_GEMM_POISON=$v timeout -k 10 120 "$B" replay "$c" --backend cuda > "$o/poison-$v.log" 2>&1
      echo "exit $?" >> "$o/poison-$v.log"; echo "== poison $v: $(grep -E '^replay|^exit' "$o/poison-$v.log" | cut -c1-200 | tr '\n' ' ')"
    done
    for g in poison simple; do
      [ "$(left)" -gt 90 ] || break
      envs=(RECAP_GEMM_POISON=1); [ $g = simple ] && envs=(RECAP_GEMM=simple)
      env "${envs[@]}" RECAP_BUILD=.device/slim OUT="$o/sanitizer-$g" SANITIZER_TOOLS=initcheck SANITIZER_TESTS=none \
        SANITIZER_DIMS=small SANITIZER_TIMEOUT=$(( $(left) - 30 )) timeout -k 10 $(( $(left) - 10 )) \
        bash scripts/gpu-sanitizer.sh "${POISON_CASES:-2}" > "$o/sanitizer-$g.log" 2>&1
      echo "exit $?" >> "$o/sanitizer-$g.log"; echo "== $g:"; cat "$o/sanitizer-$g/summary.txt" 2>/dev/null
    done ;;
  testsinit)  # the GPU test binaries under initcheck (cuBLAS's outputs poisoned, as in session 15's
              # call 5, where recap_cuda_tests found the accounting script incrementing a buffer fresh
              # from malloc_async; carry .device/slim whole)
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    for t in ${TESTS:-recap_cuda_tests runtime_core_gpu_test runtime_gpu_test executors_gpu_test models_gpu_test conformance_gpu_test}; do
      [ "$(left)" -gt 20 ] || break
      bin=$(find .device/slim/tests -name "$t" -type f | head -n 1)
      RECAP_GEMM_POISON=1 RECAP_CUDA_BLOCK_CACHE=0 timeout -k 5 $(( $(left) - 10 )) "$cs" --tool initcheck --report-api-errors no \
        --error-exitcode 99 --print-limit 20 "$bin" > "$o/$t.log" 2>&1
      echo "$t exit $? $(grep -oE 'ERROR SUMMARY: [0-9]+' "$o/$t.log" | tail -1) $(grep -oE '\[  (PASSED|FAILED)  \] [0-9]+ tests?' "$o/$t.log" | tr '\n' ' ')" | tee -a "$o/summary.txt"
    done ;;
  checks)
    timeout -k 20 200 "$B" mutants --backend cuda --fault cuda-dropout-offset --cases 20 --shrink-limit 100 --corpus-dir "$o/mutants" \
      --report "$o/mutants-cuda.json" > "$o/mutants-cuda.log" 2>&1; echo "exit $?" >> "$o/mutants-cuda.log"
    RECAP_BUILD=.device/slim OUT="$o/sanitizer" SANITIZER_TIMEOUT=${SANITIZER_TIMEOUT:-60} SANITIZER_DIMS=small \
      timeout -k 10 $(( $(left) - 10 )) bash scripts/gpu-sanitizer.sh ${SANITIZER_CASES:-3} > "$o/sanitizer.log" 2>&1; echo "exit $?" >> "$o/sanitizer.log"
    cat "$o/sanitizer/summary.txt" 2>/dev/null ;;
  *) echo "usage: run.sh scaling | quick | campaign I/N | differential I/N | rates | checks | kernels | verify | final | last | initcheck | poison | testsinit" > "$o/usage.txt"; exit 2 ;;
esac
summary
