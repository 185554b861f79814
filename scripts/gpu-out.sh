# Sourced by the device-call scripts under results/h200/: sets $o, the folder their outputs go to
# ($OUT on the GPU machine, gpu-logs/ elsewhere), and packs that folder into one all.tgz on every
# exit or SIGTERM. The device tool brings back at most 8 files, and nothing of a call it stops
# (results/h200/2026-12-01-megatron-0.19.2-500: run3.sh's first call lost its report that way).
o=$(realpath -m "${OUT:-gpu-logs}")
mkdir -p "$o"
pack() { trap - EXIT TERM; tar czf /tmp/all.tgz -C "$o" . && rm -rf "${o:?}"/* && mv /tmp/all.tgz "$o/"; }
# Only the outermost script packs: a nested one (run-retriage.sh runs run-campaigns.sh) would leave
# an all.tgz inside its parent's, which the parent's summary cannot read.
if [ -z "${RECAP_GPU_OUT_PACKS:-}" ]; then
  export RECAP_GPU_OUT_PACKS=1
  trap pack EXIT TERM
fi
