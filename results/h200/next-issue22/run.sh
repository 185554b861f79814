#!/usr/bin/env bash
# Issue 22's first device calls, prepared (from the tree's root; .device carried: the stripped
# `recap` of the gpu preset, as results/h200/next-issue21 builds it). One mode per call, ending
# within CALL_S seconds (default 540):
#   groups     the torch rank groups on CUDA: every tests/cli/data rank file (tp 2, sp, pp 2, tp 2
#              inside pp 2, pp 2 with vp 2, dp 2 replicas; per-layer graphs on pp 2 and pp 2 vp 2 stages replayed
#              in the 1F1B orders: graphs across ranks) replayed clean, then under each planted rank fault its
#              oracle must catch (as cli.sut_torch_ranks_faults, cli.sut_torch_pp_faults,
#              cli.sut_torch_tp_pp_faults and cli.sut_torch_vp_faults do on the CPU). On one GPU the ranks share it over gloo (core/ranks.py backend_for); on
#              two or more, nccl.
#   campaign   recap fuzz --sut torch --backend cuda --ranks ${RANKS:-4} (groups of every divisor),
#              seed 1, ${CASES:-300} cases, 4 jobs: every shape drawn, every bucket in the report
#   scaling    (two or more GPUs) recap fuzz --sut torch --backend cuda --gpus G for G = 1 .. all,
#              ${RATE_S:-60} s of cases at 4 jobs per GPU: cases a minute by GPU count
#   megatron   megatron-core 0.19.2's rank groups (.whl carried): tests/cli/data/mc-*.json (tp 2, dp 2,
#              tp 2 inside dp 2) replayed clean, then each under the framework mutant its oracle must
#              catch (mcore-tp-seed-shared, mcore-dp-grads-not-reduced, dist-all-reduce-skipped); then
#              recap fuzz --sut megatron@0.19.2 --ranks ${RANKS:-2} seed 1 under mcore-tp-seed-shared (found
#              and shrunk keeping tp 2: the issue's planted cross-rank fault) and, in what is left, a
#              clean campaign of ${CASES:-300} cases. On one GPU the ranks share it over gloo: eager tp
#              cases only (dp and pp need collectives gloo cannot run on CUDA tensors: the mc-dp2 files are
#              skipped naming it); sp needs apex, which the machine lacks (megatron's local spec refuses it).
#   RECAP_GIT_COMMIT=<sha> bash results/h200/next-issue22/run.sh groups
# Not here: megatron-core with pp (the megatron driver's rank groups run tp and dp only).
set -u
. scripts/gpu-call.sh  # $o, $B, CALL_S, left(), machine.txt
D=tests/cli/data
W=(--worker-env "PYTHONPATH=$PWD/drivers")
case ${1:-} in
  groups)
    timeout -k 10 $(( $(left) / 3 )) "$B" replay --sut torch --backend cuda "${W[@]}" $D/tp2-masks.json $D/tp2-grads.json \
      $D/tp2-sp-masks.json $D/tp2-sp-grads.json $D/pp2-masks.json $D/pp2-grads.json $D/tp2-pp2-masks.json $D/tp2-pp2-grads.json \
      $D/pp2-vp2-masks.json $D/pp2-vp2-grads.json $D/tp2-dp2-grads.json $D/pp2-dp2-grads.json $D/tp2-dp2-masks.json \
      $D/dp2-masks.json $D/pp2-graphs.json $D/pp2-vp2-graphs.json --report "$o/clean.json" > "$o/clean.log" 2>&1
    echo "exit $?" >> "$o/clean.log"
    all=rank_recompute_equal,tp_masks_differ,outside_masks_equal,grads_match_one_rank,pp_schedule_1f1b,pp_stage_masks_differ,dp_grads_reduced,training,reference
    for f in tp-seed-shared:tp2-pp2-masks tp-recompute-stale:tp2-pp2-masks dp-seed-per-rank:tp2-pp2-masks \
             tp-grad-not-reduced:tp2-pp2-grads pp-stage-seed-shared:tp2-pp2-masks pp-send-stale:tp2-pp2-grads \
             pp-schedule-gpipe:tp2-pp2-grads sp-grad-not-reduced:tp2-sp-grads sp-block-no-fork:tp2-sp-masks \
             vp-chunk-layers-contiguous:pp2-vp2-grads dp-grad-not-reduced:tp2-dp2-grads dp-data-same:dp2-masks; do
      [ "$(left)" -gt 40 ] || break
      fault=${f%%:*}; file=$D/${f#*:}.json
      timeout -k 10 60 "$B" replay --sut torch --backend cuda "${W[@]}" "$file" --property "$all" \
        --worker-env "RECAP_RANK_FAULT=$fault" > "$o/$fault.log" 2>&1; echo "exit $?" >> "$o/$fault.log"
      echo "== $fault: $(grep -E '^  [a-z_0-9]+ +incorrect' "$o/$fault.log" | cut -c1-120 | head -2 | tr '\n' ' ')"
    done
    grep -E "^replay|^  (tp_|outside|grads_match|pp_|dp_|rank_|reference)" "$o/clean.log" | cut -c1-160 ;;
  megatron)
    site=/tmp/recap-site-0.19.2
    pip install -q --no-deps --target $site .whl/megatron_core-0.19.2-*.whl > /dev/null 2>&1
    M=(--sut megatron@0.19.2 --backend cuda --worker-env "PYTHONPATH=$site:$PWD/drivers")
    timeout -k 10 $(( $(left) / 5 )) "$B" replay "${M[@]}" $D/mc-tp2-grads.json $D/mc-tp2-masks.json $D/mc-dp2-grads.json \
      $D/mc-tp2-dp2-grads.json $D/mc-pp2-vp2-grads.json --report "$o/mc-clean.json" > "$o/mc-clean.log" 2>&1; echo "exit $?" >> "$o/mc-clean.log"
    all=rank_recompute_equal,tp_masks_differ,outside_masks_equal,grads_match_one_rank,dp_grads_reduced,training,reference
    muts="mcore-tp-seed-shared:mc-tp2-masks dist-all-reduce-skipped:mc-tp2-grads"
    # dp needs megatron's coalesced grad all-reduce, which gloo refuses for CUDA tensors: a GPU per rank
    [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && muts="$muts mcore-dp-grads-not-reduced:mc-dp2-grads"
    for f in $muts; do
      [ "$(left)" -gt 60 ] || break
      m=${f%%:*}; file=$D/${f#*:}.json
      timeout -k 10 90 "$B" replay "${M[@]}" "$file" --property "$all" --worker-env "RECAP_FRAMEWORK_MUTANT=$m" \
        > "$o/mc-$m.log" 2>&1; echo "exit $?" >> "$o/mc-$m.log"
      echo "== $m: $(grep -E '^  [a-z_0-9]+ +incorrect' "$o/mc-$m.log" | cut -c1-120 | head -2 | tr '\n' ' ')"
    done
    grep -E "^replay|^  (tp_|outside|grads_match|dp_|rank_|reference|training)" "$o/mc-clean.log" | cut -c1-160
    [ -n "${REPLAYS_ONLY:-}" ] && exit 0  # the replays alone (a short call)
    [ "$(left)" -gt 120 ] && { timeout -k 20 $(( $(left) / 2 )) "$B" fuzz "${M[@]}" --ranks "${RANKS:-2}" --cases 200 --seed 1 \
      --jobs 2 --shrink-limit 40 --worker-env RECAP_FRAMEWORK_MUTANT=mcore-tp-seed-shared --corpus-dir "$o/c-mut" \
      --report "$o/mc-mutant-fuzz.json" > "$o/mc-mutant-fuzz.log" 2>&1; echo "exit $?" >> "$o/mc-mutant-fuzz.log"
      grep -E "cases in|counterexample|shrunk|no failure" "$o/mc-mutant-fuzz.log" | head -5; }
    [ "$(left)" -gt 90 ] && { timeout -k 20 $(( $(left) - 10 )) "$B" fuzz "${M[@]}" --ranks "${RANKS:-2}" --cases "${CASES:-300}" \
      --seed 1 --jobs 2 --shrink-limit 20 --known-findings corpus/known-findings/megatron-0.19.2.json \
      --corpus-dir "$o/c-clean" --report "$o/mc-campaign.json" > "$o/mc-campaign.log" 2>&1; echo "exit $?" >> "$o/mc-campaign.log"
      grep -E "cases in|by disposition|no failure|counterexample" "$o/mc-campaign.log" | head -8; } ;;
  campaign)
    timeout -k 30 $(( $(left) - 20 )) "$B" fuzz --sut torch --backend cuda "${W[@]}" --ranks "${RANKS:-4}" --cases "${CASES:-300}" \
      --seed 1 --jobs 4 --shrink-limit 20 --corpus-dir "$o/corpus" --report "$o/campaign.json" > "$o/campaign.log" 2>&1
    echo "exit $?" >> "$o/campaign.log"; grep -E "cases in|by disposition|no failure|counterexample" "$o/campaign.log" ;;
  scaling)
    n=$(nvidia-smi -L | wc -l)
    for g in $(seq 1 "$n"); do
      [ "$(left)" -gt $(( ${RATE_S:-60} + 40 )) ] || break
      gpus=$(seq -s, 0 $(( g - 1 )))
      timeout -k 20 $(( ${RATE_S:-60} + 30 )) "$B" fuzz --sut torch --backend cuda "${W[@]}" --gpus "$gpus" --jobs $(( 4 * g )) \
        --cases 100000 --seed 1 --time-budget "${RATE_S:-60}" --shrink-limit 4 --known-findings corpus/known-findings/torch-2.11.json \
        --corpus-dir "$o/c$g" --report "$o/gpus$g.json" > "$o/gpus$g.log" 2>&1; echo "exit $?" >> "$o/gpus$g.log"
      echo "== $g GPUs: $(grep -E 'cases/min' "$o/gpus$g.log" | tail -1)"
    done ;;
  *) echo "usage: run.sh groups | megatron | campaign | scaling" > "$o/usage.txt"; exit 2 ;;
esac
