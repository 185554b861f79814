#!/usr/bin/env bash
# Campaigns against the real frameworks on the GPU machine: torch, megatron@0.15.3, megatron@0.19.2.
# Brings its own megatron-core wheels (downloaded here, carried there in .whl/, see README) and
# installs each into a folder of its own, so one process sees one version. Writes under $OUT:
# per SUT its report (recap.report/1), its console log and the corpus files of its findings.
#   scripts/gpu-sut-campaigns.sh [CASES] [JOBS]           # there, from the tree's root
# Environment: RECAP_BIN (default .device/slim/harness/cli/recap), SUTS (default: all three),
# SEED (default 1), OUT (default gpu-logs).
set -uo pipefail
cd "$(dirname "$0")/.."
cases="${1:-500}"
jobs="${2:-8}"
seed="${SEED:-1}"
out="${OUT:-gpu-logs}"
bin="${RECAP_BIN:-.device/slim/harness/cli/recap}"
suts="${SUTS:-torch megatron@0.15.3 megatron@0.19.2}"
mkdir -p "$out"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
drivers="$PWD/drivers"

site_of() {  # the folder megatron-core VERSION is installed in (installed once)
  local v="$1" dir="/tmp/recap-site-$1"
  if [ ! -d "$dir/megatron" ]; then
    local extra=""
    python3 -c "import numpy" 2>/dev/null || extra=".whl/numpy-*.whl"
    pip install --no-deps --target "$dir" .whl/megatron_core-"$v"-*.whl $extra -q >"$out/pip-$v.log" 2>&1 \
      || { echo "cannot install megatron-core $v (see $out/pip-$v.log)" >&2; return 1; }
  fi
  echo "$dir"
}

status=0
for sut in $suts; do
  name="${sut//@/-}"
  env_args=(--worker-env "PYTHONPATH=$drivers")
  case "$sut" in
    megatron@*)
      site=$(site_of "${sut#megatron@}") || { status=1; continue; }
      env_args=(--worker-env "PYTHONPATH=$site:$drivers")
      ;;
  esac
  start=$(date +%s.%N)
  "$bin" fuzz --sut "$sut" --backend cuda --cases "$cases" --jobs "$jobs" --seed "$seed" \
    --require-memory-savings --case-timeout 300 "${env_args[@]}" \
    --corpus-dir "$out/corpus-$name" --report "$out/$name.json" >"$out/$name.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  echo "$sut: exit $rc, $(python3 -c "print(f'{$end - $start:.1f}')") s wall" | tee -a "$out/summary.txt"
  tail -n 4 "$out/$name.log" | tee -a "$out/summary.txt"
  [ $rc -le 1 ] || status=1
done
exit $status
