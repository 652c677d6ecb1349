#!/bin/bash
# A CPU rehearsal of the KTO window on the Qwen tier (`plan --base qwen2.5-coder-0.5b --parts kto,bench`,
# docs/TRAINING.md "KTO on the Qwen tier"): pack (boot + the tied base cut for the window's tree) → plan → the
# shipped Qwen adapter copied as the KTO command carries it → "GPU": receive every upload, `align-start
# --adapter <the copy>` (corpus → wait for the base → self-play + held-out self-play with the Qwen tier → align
# data → align kto → calibration → measure), `align-poll` collecting → here: `align-export`. The device commands
# run locally against a fresh work dir and base cache with ONLY the GPU image's packages importable (pygls,
# lsprotocol, msgspec, tree_sitter, git, gguf, ... blocked; gguf allowed from the boot bundle's vendor/ folder,
# as it travels), at CPU sizes (a few self-play samples, 2 KTO steps). Each step's wall time goes to
# $R/timings. Usage, from the repository root:
#     R=/tmp/reh-kto PY=.venv/bin/python nice -n 5 engine/train/recipe/rehearse_kto_window.sh
set -e -o pipefail
R=${R:-/tmp/reh-kto}; PY=${PY:-python}; FILES=${FILES:-200}; SELFPLAY=${SELFPLAY:-8}
mkdir -p "$R"; rm -rf "$R/gpu" "$R/cache" "$R/merged" "$R/out" "$R/aligned" "$R/adapter" "$R/timings" "$R/block"
G="$PY -m engine.train.gpu_recipe"
export PYTHONPATH=$PWD
t() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); printf "%8.1f s  %s\n" "$(echo "$e - $s" | bc)" "$*" | cut -c1-220 >> "$R/timings"; }
# here: the window's pack at CPU size (the KTO job reads its corpus sources and the base from it)
t $G pack --config engine/train/configs/gpu_qwen05b_bd3.json --out "$R/pack" --set device=cpu dtype=fp32 \
    --max-files "$FILES" --eval-split single-line --eval-limit 2 --next-edit-cases 2 --no-wheels > "$R/pack.json"
t $G plan --base qwen2.5-coder-0.5b --pack "$R/pack" --budget-s 900 --kind nvidia-h200 --parts kto,bench > "$R/plan.txt"
grep -q "align-start --adapter .devcarry/adapter/qwen2_5-coder-0_5b-bd3" "$R/plan.txt"  # the window's KTO command
mkdir -p "$R/adapter" && cp engine/weights/qwen2_5-coder-0_5b-bd3.safetensors engine/weights/qwen2_5-coder-0_5b-bd3.json "$R/adapter/"
# "GPU": only the image's packages, gguf only from what the boot bundle carries
$PY -m engine.train.recipe.image_env "$R/block" --carried gguf="$R/gpu/boot/vendor" > /dev/null
gpu() { env EDIT_SERVER_GPU_WORK="$R/gpu" XDG_CACHE_HOME="$R/cache" EDIT_SERVER_MERGED_CACHE="$R/merged" \
    PYTHONPATH="$R/block:$PWD" "$@"; }
gpu $PY -c "import msgspec" 2>/dev/null && { echo "the blocker does not block" >&2; exit 1; }
for up in "$R"/pack/up[1-9]; do t gpu $G receive "$up"; done
t gpu $G align-start --adapter "$R/adapter/qwen2_5-coder-0_5b-bd3" --set device=cpu threads=2 selfplay="$SELFPLAY" \
    heldout_selfplay=4 measure_limit=4 kto.steps=2 kto.batch-size=2 kto.save-every=1 kto.eval-every=2 \
    kto.eval-examples=4 kto.min-count=2 kto.z0-pairs=2 kto.max-prompt=256 kto.max-canvas=32 kto.top-layers=2 \
    kto.max-minutes=0 > "$R/align-start.json"
t gpu $G align-poll --wait 5400 --every 60 --to "$R/out" > "$R/poll.log"
gpu $G align-status > "$R/align-status.json"
grep -q '"phase": "done"' "$R/align-status.json" || { echo "the alignment job did not finish: $R/align-status.json" >&2; exit 1; }
grep -q "align measure exited" "$R/out/align.log" && { echo "align measure failed: $R/out/align.log" >&2; exit 1; }
grep -q '"measure": {' "$R/out/align-status.json" || { echo "no measure in $R/out/align-status.json" >&2; exit 1; }
# here
t $G align-export "$R/out" --to "$R/aligned/kto" > "$R/export.json"  # as the plan says: the files_at folder
ls -l "$R/out" "$R"/out/align-* "$R/aligned" > "$R/out.ls"
cat "$R/timings"
