#!/usr/bin/env bash
# Campaigns against the real frameworks on the GPU machine (CAMPAIGNS: torch, megatron-<V>,
# megatron-main, each also with -control: no checkpoints and no dropout). Brings its own megatron-core wheels
# (downloaded here into .whl/, carried there, see README) and installs each version into a folder
# of its own, so one worker sees one version. Writes under $OUT: per campaign its report
# (recap.report/1), its console log, the corpus files of its findings, and the replay of those
# files and of the findings kept in corpus/frameworks/<sut>/ on the same SUT (the same verdict is
# expected).
#   scripts/gpu-sut-campaigns.sh [CASES] [JOBS]            # there, from the tree's root
# Environment: RECAP_BIN (default .device/slim/harness/cli/recap), CAMPAIGNS (names, default all),
# SEED (default 1), BUDGET_<name> (seconds after which no new case starts), LIMIT_<name> (a hard
# limit), SHRINK_LIMIT (evaluations a shrink may spend, default 25), OUT (default gpu-logs),
# CHUNK_CASES (cases per chunk, default 100: smaller keeps more --jobs busy in a short campaign),
# REPLAY_DEADLINE (epoch seconds by which the replays stop, so a caller's own time limit holds). Every
# campaign runs all its cases (the default): a framework with known bugs fails often.
set -uo pipefail
cd "$(dirname "$0")/.."
cases="${1:-500}"
jobs="${2:-8}"
seed="${SEED:-1}"
out="${OUT:-gpu-logs}"
bin="${RECAP_BIN:-.device/slim/harness/cli/recap}"
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# the logs show progress every 10 s and every worker's stderr (slow start-ups, hangs)
export RECAP_PROGRESS_LINES=1 RECAP_WORKER_STDERR=1
# many workers share one GPU: each is capped (a leak then fails its own cases, named in the log)
export RECAP_CUDA_MEMORY_FRACTION="${RECAP_CUDA_MEMORY_FRACTION:-0.04}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
drivers="$PWD/drivers"

site_of() {  # the folder megatron-core VERSION is installed in (installed once)
  local v="$1" dir="/tmp/recap-site-$1"
  if [ ! -d "$dir/megatron" ]; then
    local extra=""
    python3 -c "import numpy" 2>/dev/null || extra=$(ls .whl/numpy-*.whl)
    pip install --no-deps --target "$dir" .whl/megatron_core-"$v"-*.whl $extra -q >"$out/pip-$v.log" 2>&1 \
      || { echo "cannot install megatron-core $v (see $out/pip-$v.log)" >&2; return 1; }
  fi
  echo "$dir"
}

# A campaign's name says what it runs: torch, megatron-<V> (the wheel of megatron-core V in
# .whl/) or megatron-main (the Megatron-LM checkout carried in .device/megatron-main, its version
# and commit read from the tree); "-control" after a name: without checkpoints and dropout (graphs
# alone: a failure there is a graph bug of that version or a harness artifact). Its findings are
# kept in corpus/frameworks/<name without -control>/ (torch: torch-2.11), its known findings in
# corpus/known-findings/<same>.json (KNOWN_<name> names another file).
want="${CAMPAIGNS:-torch torch-control megatron-0.15.3 megatron-0.19.2}"
table=""
for name in $want; do
  base="${name%-control}" extra=""
  [ "$base" != "$name" ] && extra="--no-checkpoint --no-dropout"
  case "$base" in
    torch) sut=torch kept=torch-2.11 ;;
    megatron-main) sut=megatron kept=megatron-main ;;
    megatron-*) sut="megatron@${base#megatron-}" kept="$base" ;;
    *) echo "unknown campaign '$name' (torch, megatron-<V>, megatron-main, each with -control)" >&2; exit 2 ;;
  esac
  table+="$name|$sut|$extra|$kept"$'\n'
done

# seconds the replays may still take (0: no limit; 1 once the deadline has passed)
replay_limit() {
  [ -n "${REPLAY_DEADLINE:-}" ] || { echo 0; return; }
  local l=$(( REPLAY_DEADLINE - $(date +%s) ))
  [ $l -gt 0 ] && echo $l || echo 1
}

status=0
while IFS='|' read -r name sut extra kept; do
  [[ " $want " == *" $name "* ]] || continue
  [ -n "$name" ] || continue
  pypath="$drivers"
  if [[ "$sut" == megatron@* ]]; then
    site=$(site_of "${sut#megatron@}") || { status=1; continue; }
    pypath="$site:$drivers"
  elif [ "$sut" = megatron ]; then
    [ -d .device/megatron-main/megatron/core ] || { echo "no Megatron-LM checkout in .device/megatron-main" >&2; status=1; continue; }
    pypath="$PWD/.device/megatron-main:$drivers"
  fi
  budget_var="BUDGET_${name//[.-]/_}"
  budget="${!budget_var:-0}"
  limit_var="LIMIT_${name//[.-]/_}"  # a hard wall-clock limit of the campaign (0: none)
  limit="${!limit_var:-0}"
  # the SUT's known findings (bucket and configuration): the report judges every failing case by
  # them, and a failure outside them fails the campaign (exit 1); KNOWN_FINDINGS=0 leaves them out
  known=()
  known_var="KNOWN_${name//[.-]/_}"
  known_file="${!known_var:-corpus/known-findings/$kept.json}"
  if [ "${KNOWN_FINDINGS:-1}" != 0 ] && [ -f "$known_file" ]; then
    known=(--known-findings "$known_file")
  fi
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout "$limit" "$bin" fuzz "${known[@]}" --sut "$sut" --backend cuda --cases "$cases" --jobs "$jobs" --seed "$seed" \
    --time-budget "$budget" --shrink-limit "${SHRINK_LIMIT:-25}" --chunk-cases "${CHUNK_CASES:-100}" --require-memory-savings --case-timeout 300 --worker-env "PYTHONPATH=$pypath" $extra \
    --corpus-dir "$out/corpus-$name" --report "$out/$name.json" >"$out/$name.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  echo "== $name (--sut $sut $extra): exit $rc, $(python3 -c "print(f'{$end - $start:.1f}')") s wall" | tee -a "$out/summary.txt"
  tail -n 6 "$out/$name.log" | tee -a "$out/summary.txt"
  [ $rc -le 1 ] || status=1
  # every finding replays on the same SUT with the same verdict (the file records its sut)
  if ls "$out/corpus-$name"/*.json >/dev/null 2>&1; then
    timeout "$(replay_limit)" "$bin" replay "$out/corpus-$name"/*.json --backend cuda --require-memory-savings --case-timeout 300 \
      --worker-env "PYTHONPATH=$pypath" --report "$out/$name-replay.json" >"$out/$name-replay.log" 2>&1
    echo "   replay of its corpus files: exit $?; $(tail -n 1 "$out/$name-replay.log")" | tee -a "$out/summary.txt"
  fi
  # the findings kept in the repository replay with their verdicts too
  kept_files=()
  if [ -n "$kept" ]; then
    for p in corpus/frameworks/"$kept"/*.json; do
      [ -f "$p" ] && kept_files+=("$p")
    done
  fi
  if [ ${#kept_files[@]} -gt 0 ]; then
    timeout "$(replay_limit)" "$bin" replay "${kept_files[@]}" --backend cuda --require-memory-savings --case-timeout 300 \
      --worker-env "PYTHONPATH=$pypath" --report "$out/$name-kept-replay.json" >"$out/$name-kept-replay.log" 2>&1
    echo "   replay of corpus/frameworks/$kept: exit $?; $(tail -n 1 "$out/$name-kept-replay.log")" | tee -a "$out/summary.txt"
  fi
done <<<"$table"
exit $status
