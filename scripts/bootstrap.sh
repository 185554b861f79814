#!/usr/bin/env bash
# Set-up in one command, on a fresh Debian 12 machine like CI's:
#   scripts/bootstrap.sh run    install what is missing, configure, build, run recap's main job (recap fuzz)
#   scripts/bootstrap.sh test   the same set-up, then the whole test suite, and again under ASan + UBSan (CI runs this)
# Extra arguments after `run` go to recap's main job.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-}"
case "$mode" in
  run | test) shift ;;
  *) echo "usage: scripts/bootstrap.sh run|test [recap arguments]" >&2; exit 2 ;;
esac

# Debian packages recap builds with. The CUDA toolkit (nvcc) comes with the machine image; without
# it recap builds host-only and runs everything on sim.
packages=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev
          nlohmann-json3-dev libcli11-dev
          python3-jsonschema libxml2-utils  # tests validate the report and the JUnit file
          python3-plotly                    # plotly.js, which `recap report` inlines into its page
          chromium                          # cli.report_html_in_chromium loads that page headless
          clang                             # the sanitize preset (ASan + UBSan), which `test` runs too
          python3-venv)                     # the drivers' Python environment (below)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# The drivers' Python environment: a venv in .venv-drivers with the pins of
# drivers/requirements-cpu.txt (torch on the CPU, ~4.7 GB, about 2 minutes from PyPI; ruff and mypy
# for the drivers.ruff and drivers.mypy ctests); installed
# for `test` (the driver tests and cli.sut_torch_* run against it; RECAP_REQUIRE_TORCH makes a
# skip for want of torch a failure) and for a `run` whose arguments ask for torch or megatron.
# Left alone when every pin is installed already.
venv=.venv-drivers
req=drivers/requirements-cpu.txt
pins_installed() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$req" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if line:
        name, want = line.split("==")
        try:
            if version(name) != want: sys.exit(1)
        except PackageNotFoundError:
            sys.exit(1)
PY
}
need_venv=0
[ "$mode" = test ] && need_venv=1
for a in "$@"; do
  case "$a" in torch* | megatron* | --sut=torch* | --sut=megatron*) need_venv=1 ;; esac
done
if ((need_venv)); then
  if ! pins_installed; then
    echo "bootstrap: installing $req in $venv (torch, ~4.7 GB)"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir -r "$req"  # no second copy in ~/.cache
    pins_installed || { echo "bootstrap: $venv does not hold the pins of $req after installing" >&2; exit 1; }
  fi
  echo "bootstrap: drivers' Python $venv/bin/python, torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
fi
if [ "$mode" = test ]; then
  export RECAP_REQUIRE_TORCH=1  # tests/drivers.cmake: the driver tests and cli.sut_torch_* must run, not skip
  # megatron-core's own pipeline-schedule functions, read from its wheels (2 MB each, never
  # installed: they need CUDA) by drivers/tests/test_schedules.py, which skips where none is here
  for v in 0.15.3 0.19.2; do
    ls .whl/megatron_core-"$v"-*.whl >/dev/null 2>&1 && continue
    "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
      -d .whl "megatron-core==$v" || echo "bootstrap: megatron-core $v's wheel not downloaded (test_schedules skips it)"
  done
elif ((need_venv)); then
  export RECAP_PYTHON="${RECAP_PYTHON:-$PWD/$venv/bin/python}"  # the interpreter of recap's torch and megatron workers
fi

cmake --preset default
cmake --build --preset default -j "$(nproc)"

if [ "$mode" = run ]; then
  # recap's main job: a fuzz campaign on the default backend (auto: the GPU when usable, else
  # sim) over the configurations recap vouches for (the graph-safe policy), 2000 cases or 10
  # minutes, counterexamples to corpus/found. Arguments replace the campaign.
  if (($#)); then exec build/harness/cli/recap fuzz "$@"; fi
  exec build/harness/cli/recap fuzz --backend auto --policy graph-safe --cases 2000 --time-budget 600 \
    --jobs "$(nproc)" --report build/fuzz-report.json
else
  ctest --preset default
  # once more under ASan + UBSan (clang, host only): a memory or undefined-behaviour error in recap
  # fails CI, not only a wrong verdict. The unit and conformance tests (with the cli checks and
  # property tests labelled unit: small budgets); the long campaigns run some ten times slower
  # under the sanitizers and are left to the default build.
  cmake --preset sanitize
  cmake --build --preset sanitize -j "$(nproc)"
  exec ctest --preset sanitize -L "unit|conformance"
fi
