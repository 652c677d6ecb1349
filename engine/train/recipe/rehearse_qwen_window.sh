#!/bin/bash
# A CPU rehearsal of the Qwen2.5-Coder-0.5B GPU window (docs/TRAINING.md, "The Qwen window"): the tied-output
# copy + pack (boot + the copy cut for the window's tree) → plan → "GPU": receive up1 + start, receive the
# rest (join, sha256, GGUF header with the boot's vendored gguf), the job (corpus → base → train → export →
# held-out next edits in process, HumanEval) → poll/collect → keep → export here. The device commands run locally against a fresh work dir and
# base cache with ONLY the GPU image's packages importable (pygls, lsprotocol, msgspec, tree_sitter, git,
# gguf, ... blocked; gguf allowed from the boot bundle's vendor/ folder, as it travels). Each step's wall time
# goes to $R/timings, the peak memory of the job to $R/peak_rss. Usage, from the repository root:
#     R=/tmp/reh-qwen PY=.venv/bin/python nice -n 5 engine/train/recipe/rehearse_qwen_window.sh
set -e -o pipefail
R=${R:-/tmp/reh-qwen}; PY=${PY:-python}; STEPS=${STEPS:-2}; TASKS=${TASKS:-5}; FILES=${FILES:-200}; NE=${NE:-2}
mkdir -p "$R"; rm -rf "$R/gpu" "$R/cache" "$R/merged" "$R/out" "$R/kept" "$R/exported" "$R/timings" "$R/block"
G="$PY -m engine.train.gpu_recipe"
export PYTHONPATH=$PWD
cp engine/train/recipe/throughput.json "$R/throughput.json"  # `keep` records the CPU's speed here, not in the repo
export EDIT_SERVER_GPU_THROUGHPUT="$R/throughput.json"
t() { local s e; s=$(date +%s.%N); "$@"; e=$(date +%s.%N); printf "%8.1f s  %s\n" "$(echo "$e - $s" | bc)" "$*" | cut -c1-220 >> "$R/timings"; }
# here: the GPU config at CPU size; the tied copy is cached beside the pinned base after its first write
t $G pack --config engine/train/configs/gpu_qwen05b_bd3.json --out "$R/pack" --set device=cpu dtype=fp32 \
    seq_len=256 max_canvas=64 max_edit_canvas=64 batch_size=1 grad_accum=1 warmup=1 steps="$STEPS" threads=2 val_examples=2 \
    val_every="$STEPS" save_every="$STEPS" --max-files "$FILES" --eval-split single-line --eval-limit "$TASKS" \
    --next-edit-cases "$NE" --no-wheels > "$R/pack.json"
t $G plan --base qwen2.5-coder-0.5b --pack "$R/pack" --budget-s 900 --kind nvidia-h200 > "$R/plan.txt"
# "GPU": only the image's packages, gguf only from what the boot bundle carries
$PY -m engine.train.recipe.image_env "$R/block" --carried gguf="$R/gpu/boot/vendor" > /dev/null
gpu() { env EDIT_SERVER_GPU_WORK="$R/gpu" XDG_CACHE_HOME="$R/cache" EDIT_SERVER_MERGED_CACHE="$R/merged" \
    PYTHONPATH="$R/block:$PWD" "$@"; }
gpu $PY -c "import msgspec" 2>/dev/null && { echo "the blocker does not block" >&2; exit 1; }
t gpu $G receive "$R/pack/up1"
t gpu $G start  # no window: the config's $STEPS steps, then export and the HumanEval sample
for up in "$R"/pack/up[2-9]; do t gpu $G receive "$up"; done
( peak=0; while sleep 5; do  # the job's resident memory (it and its children), sampled
    kb=$(ps -eo rss=,args= | grep -F "$R/gpu" | grep -v grep | awk '{s+=$1} END {print s+0}')
    [ "$kb" -gt "$peak" ] && peak=$kb && echo "$peak kB" > "$R/peak_rss"
    gpu $PY -m engine.train.gpu_recipe status | grep -q '"running": true' || break; done ) &
t gpu $G poll --wait 5400 --every 60 --to "$R/out" > "$R/poll.log"
wait
# here
t $G keep "$R/out" --to "$R/kept" > "$R/keep.json"
t $G export "$R/kept" --to "$R/exported/default"
ls -l "$R/out" "$R"/out/ckpt-* > "$R/out.ls"
cat "$R/timings"
