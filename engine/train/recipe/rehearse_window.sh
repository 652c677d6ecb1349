#!/bin/bash
# A CPU rehearsal of one GPU window (docs/TRAINING.md, "Rehearsal of a window"): pack → plan → receive +
# start (the window's clock) + bench → receive the base → poll (train → export → eval → latency) → keep →
# export → eval here. The device commands run locally against a fresh work dir and base cache (the "GPU
# machine"); each step's wall time goes to $R/timings. Usage, from the repository root:
#     R=/tmp/reh PY=.venv/bin/python nice -n 5 engine/train/recipe/rehearse_window.sh
set -e -o pipefail
R=${R:-/tmp/reh-window}; PY=${PY:-python}; TREE=${TREE:-30000000}
mkdir -p "$R"; rm -rf "$R/gpu" "$R/cache" "$R/out" "$R/kept" "$R/exported" "$R/eval-here" "$R/timings"
G="$PY -m engine.train.gpu_recipe"
export PYTHONPATH=$PWD
cp engine/train/recipe/throughput.json "$R/throughput.json"  # `keep` records the CPU's speed here, not in the repo
export EDIT_SERVER_GPU_THROUGHPUT="$R/throughput.json"
t() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); printf "%8.1f s  %s\n" "$(echo "$e - $s" | bc)" "$*" | cut -c1-220 >> "$R/timings"; }
gpu() { env EDIT_SERVER_GPU_WORK="$R/gpu" XDG_CACHE_HOME="$R/cache" "$@"; }
# here: the GPU config at CPU size (the base xz is cached in $R/pack/cache after the first pack)
t $G pack --out "$R/pack" --set device=cpu dtype=fp32 seq_len=256 max_canvas=64 batch_size=1 grad_accum=1 \
    warmup=2 threads=2 val_examples=4 --max-files 300 --eval-split single-line multi-line --eval-limit 3 \
    --no-wheels --tree-bytes "$TREE" > "$R/pack.json"
t $G plan --pack "$R/pack" --budget-s 900 --kind nvidia-h200 --tree-bytes "$TREE" --from '' > "$R/plan.txt"
# "GPU": command 1 — the window began 60 s ago; training ends 420 s into it
t gpu $G receive "$R/pack/up1"
t gpu $G start --window-start now-60 --budget-s 1800 --train-end-s 420 --eval-s 240 --latency-s 90
t gpu $G bench --budget-s 60 --shapes tiny --prompts 64,512
for up in "$R"/pack/up[2-9]; do t gpu $G receive "$up"; done
t gpu $G poll --wait 1500 --every 60 --to "$R/out" > "$R/poll.log"
# here
t $G keep "$R/out" --to "$R/kept" > "$R/keep.json"
t $G export "$R/kept" --to "$R/exported/default"
t env EDIT_SERVER_ADAPTER="$R/exported/default" $PY -m evals humaneval-infill --model smollm2-bd3 --device cpu \
    --split single-line --limit 3 --out "$R/eval-here" --no-progress > "$R/eval-here.txt"
cat "$R/timings"
