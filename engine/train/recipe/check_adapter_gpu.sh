#!/bin/bash
# On a GPU machine, after `gpu_recipe receive` of up1..up(N-1): receive the last base part, then measure an
# adapter carried beside it from the working tree — HumanEval-infilling single-line (first 100), the
# trained default's latency rows (`bench_gpu latency`), the pack's held-out next edits, and multi-line with
# what is left of BUDGET seconds. Reports go to $OUT (≤ 8 files). Session 14 ran it with 137 s of 202 left:
#   run(command="bash engine/train/recipe/check_adapter_gpu.sh runs/gpu-pack-qwen/up6 runs/s14gpu/default 150",
#       carry=["runs/gpu-pack-qwen/up6", "runs/s14gpu"])
# Only the GPU image's packages are needed (the boot bundle's vendored gguf reads the base).
set -u
LAST=${1:?the last base upload folder}; ADAPTER=${2:?adapter path without suffix}; BUDGET=${3:-150}
W=${EDIT_SERVER_GPU_WORK:-$HOME/edit-server-gpu}
OUT=${OUT:?the device tool sets OUT}
export PYTHONPATH=$W/boot/vendor${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export EDIT_SERVER_ADAPTER=$PWD/$ADAPTER
T0=$(date +%s); at() { echo "$1 at $(( $(date +%s) - T0 )) s"; }
python3 -m engine.train.gpu_recipe receive "$LAST" | tail -c 300 || exit 1
at received
DATA=$W/boot/data
timeout 60 python3 -m evals humaneval-infill --model smollm2-bd3 --device cuda --split single-line --limit 100 \
  --out /tmp/check-he1 --no-progress --data "$DATA/humaneval-infilling" 2>&1 | grep -v "^WARNING" | tail -14
cp /tmp/check-he1/report.json "$OUT/he-single.json" 2>/dev/null; cp /tmp/check-he1/results.jsonl "$OUT/he-single.jsonl" 2>/dev/null
at single-line
timeout 30 python3 -m engine.train.recipe.bench_gpu latency --model smollm2-bd3 --budget-s 20 --out "$OUT/latency.json" >/dev/null 2>&1
python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print({k:d.get(k) for k in ('single-line','next-edit','load_ms')}, d['model'].get('decode'))" "$OUT/latency.json" 2>&1 | tail -2
at latency
if [ -f "$DATA/next-edit/cases.jsonl.gz" ]; then
  timeout 45 python3 -m evals next-edit "$DATA/next-edit/cases.jsonl.gz" --model smollm2-bd3 --device cuda \
    --out /tmp/check-ne --no-progress --budget-s 25 2>&1 | grep -v "^WARNING" | head -3
  cp /tmp/check-ne/report.json "$OUT/next-edit.json" 2>/dev/null
  at next-edit
fi
LEFT=$(( BUDGET - ($(date +%s) - T0) ))
if [ "$LEFT" -gt 25 ]; then
  timeout "$LEFT" python3 -m evals humaneval-infill --model smollm2-bd3 --device cuda --split multi-line --limit 100 \
    --out /tmp/check-he2 --no-progress --data "$DATA/humaneval-infilling" 2>&1 | grep -v "^WARNING" | tail -14
  cp /tmp/check-he2/results.jsonl "$OUT/he-multi.jsonl" 2>/dev/null
fi
at done
