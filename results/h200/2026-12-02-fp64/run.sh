#!/usr/bin/env bash
# The fp64 oracles (reference, training) on the frameworks, which now apply the masks each system
# reported (mask_frames): megatron@0.19.2 without checkpoints (its math against recap's fp64
# reference: any failure is a false alarm or a modelling difference), torch with everything drawn
# (F1's wrong recomputed masks should now fail the reference too). Seed 1, 48 cases each, only
# those two properties judged. From the tree's root, .device and .whl carried.
set -u
. scripts/gpu-out.sh  # $o, packed into one all.tgz on every exit
export LD_LIBRARY_PATH=/usr/local/cuda/lib64 OMP_NUM_THREADS=1 RECAP_CUDA_MEMORY_FRACTION=0.04
bin=.device/slim/harness/cli/recap
site=/tmp/recap-site-0.19.2
[ -d $site/megatron ] || pip install --no-deps --target $site .whl/megatron_core-0.19.2-*.whl -q
timeout 100 "$bin" fuzz --sut megatron@0.19.2 --backend cuda --cases 48 --jobs 8 --chunk-cases 6 --seed 1 --no-checkpoint \
  --property reference --property training --shrink-limit 4 --worker-env "PYTHONPATH=$site:$PWD/drivers" \
  --corpus-dir "$o/corpus-megatron" --report "$o/megatron-0.19.2.json" > "$o/megatron-0.19.2.log" 2>&1 &
timeout 100 "$bin" fuzz --sut torch --backend cuda --cases 48 --jobs 4 --chunk-cases 12 --seed 1 \
  --property reference --property training --shrink-limit 4 --worker-env "PYTHONPATH=$PWD/drivers" \
  --corpus-dir "$o/corpus-torch" --report "$o/torch.json" > "$o/torch.log" 2>&1 &
wait
for f in "$o"/megatron-0.19.2.json "$o"/torch.json; do
  python3 - "$f" <<'PY'
import collections, json, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
c = collections.Counter()
for cs in r["cases"]:
    for k in cs["checks"]:
        if k["property"] in ("reference", "training"):
            why = "" if k["disposition"] == "passed" else (k.get("reason") or "")[:150]
            c[(k["property"], k["disposition"], why)] += 1
print(sys.argv[1].split("/")[-1], s["cases"], "cases", s["by_disposition"], round(s["seconds"], 1), "s")
for key, n in sorted(c.items()):
    print("  ", n, *key)
PY
done
