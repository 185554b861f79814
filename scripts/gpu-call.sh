# Sourced by a prepared device call's run.sh (results/h200/next-*), from the tree's root with the
# call's mode as its arguments: the outputs' folder $o packed on exit (scripts/gpu-out.sh), the
# environment, $B the carried recap (.device/slim), CALL_S (default 540) the call's seconds and
# left() those left to it less 30 for the packing, and machine.txt naming the machine, commit and mode.
. scripts/gpu-out.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 RECAP_CORPUS_DIR=$PWD/corpus
B=$PWD/.device/slim/harness/cli/recap
CALL_S=${CALL_S:-540}
{ nvidia-smi -L; echo "commit ${RECAP_GIT_COMMIT:-?}"; nproc --all; echo "mode $*"; } > "$o/machine.txt" 2>&1
left() { echo $(( CALL_S - 30 - SECONDS )); }
