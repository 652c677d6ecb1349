#!/usr/bin/env bash
# Regenerate the numbers of docs/QUALITY.md (HumanEval-infilling + git-history replay).
#
#   MODEL=default DEVICE=auto LIMIT= OUT=runs/quality evals/run_quality.sh
#
# MODEL    tiny-random | default | HF dir | .gguf            (default: default)
# DEVICE   auto | cpu | cuda                                (default: auto)
# LIMIT    tasks/cases per run; empty = all (multi-line has 5,815 tasks: use a GPU or LIMIT=200)
# REPOS    git checkouts to replay (default: this repository). A second real history from PyPI releases:
#          scripts/release_history.sh /tmp/hist/toolz toolz 0.9.0 0.10.0 0.11.0 0.12.0 0.12.1
# COMMITS  commits per replay (default 30)
# Results are cached per case under $OUT/<run>/ (re-running resumes); the final tables print to stdout
# and land in $OUT/TABLE.md, ready to paste into docs/QUALITY.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ES=${EDIT_SERVER:-.venv/bin/edit-server}
MODEL=${MODEL:-default}
DEVICE=${DEVICE:-auto}
OUT=${OUT:-runs/quality}
COMMITS=${COMMITS:-30}
REPOS=${REPOS:-$(pwd)}
LIM=()
[[ -n "${LIMIT:-}" ]] && LIM=(--limit "$LIMIT")
COMMON=(--model "$MODEL" --device "$DEVICE" "${LIM[@]}")
mkdir -p "$OUT"

# 1. harness sanity: canonical solutions must pass 100 %
for split in single-line multi-line random-span random-span-light; do
  $ES eval humaneval-infill --oracle --split "$split" "${LIM[@]}" --out "$OUT/oracle-$split"
done

# 2. HumanEval-infilling pass@1 through the engine API (threshold sampler, tau 0.9)
for split in single-line multi-line random-span; do
  $ES eval humaneval-infill "${COMMON[@]}" --split "$split" --out "$OUT/he-$split"
done
# quality cost of parallel decoding: one token per forward on the same tasks
$ES eval humaneval-infill "${COMMON[@]}" --split single-line --steps-mode one-per-step \
  --out "$OUT/he-single-line-one-per-step"
# the same through the real stdio server (gate off)
$ES eval humaneval-infill "${COMMON[@]}" --split single-line --via-lsp --out "$OUT/he-single-line-lsp"

# 3. git-history replay through the real server: gated, and the no-gate baseline
for repo in $REPOS; do
  name=$(basename "$repo")
  $ES eval replay "$repo" "${COMMON[@]}" --commits "$COMMITS" --out "$OUT/replay-$name"
  $ES eval replay "$repo" "${COMMON[@]}" --commits "$COMMITS" --no-gate --out "$OUT/replay-$name-nogate"
done

$ES eval table "$OUT" | tee "$OUT/TABLE.md"
