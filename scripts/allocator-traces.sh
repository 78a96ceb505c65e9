#!/usr/bin/env bash
# Writes allocator traces (`shardcast simulate --allocator-trace`) for scripts/allocator-check.py:
# every stage's replayed allocations of a set of validate rows (their simulate commands, from
# `validate --explain ROW`), of the three single-H200 PyTorch steps (validation/h200) and of one
# FSDP configuration without its rate limiter (gathers on their own stream, freed with
# record_stream). docs/simulator.md, "Reserved memory".
#
#   scripts/allocator-traces.sh [OUTDIR]         (default: allocator-traces; ROWS= to choose rows)
set -euo pipefail
# Paths as the caller gives them, then the project root (for validation/).
OUT="$(realpath -m "${1:-allocator-traces}")"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$(realpath -m "${SHARDCAST:-$ROOT/build/cli/shardcast}")"
cd "$ROOT"
# Megatron (5, 34), DeepSpeed ZeRO-1 fp16 and BF16_Optimizer pipelines near the limit and out of
# memory (BLOOM 140-172), GPT-NeoX-20B out of memory on 40 GB (222), FSDP (207, 217), ZeRO-3 (13).
ROWS="${ROWS:-5 34 140 144 148 156 158 160 172 222 207 217 13}"
mkdir -p "$OUT/models"
trace() {  # trace NAME simulate-arguments...
  local name="$1"; shift
  "$BIN" simulate "$@" --allocator-trace "$OUT/$name.json" > "$OUT/models/$name.txt"
  echo "$name: $(stat -c %s "$OUT/$name.json") bytes of trace (simulate's report: $OUT/models/$name.txt)"
}
for row in $ROWS; do
  # The whole report first: grep -m1 on a pipe would stop shardcast writing (SIGPIPE, pipefail).
  explain=$("$BIN" validate --explain "$row" --write-model "$OUT/models/row$row.json")
  line=$(grep -m1 'shardcast simulate ' <<< "$explain")
  read -r -a args <<< "${line#*shardcast simulate }"
  trace "row$row" "${args[@]}"
done
h200=(--cluster dgx-h200 --gpus 1 --cross-entropy torch --bf16-main-grads)
trace h1 --model validation/h200/llama32-1b.json "${h200[@]}" --mbs 4 --gbs 16 --seq 2048 --recompute none
trace h2 --model validation/h200/llama32-1b.json "${h200[@]}" --mbs 4 --gbs 16 --seq 2048 --recompute full
trace h3 --model validation/h200/llama32-3b.json "${h200[@]}" --mbs 2 --gbs 8 --seq 4096 --recompute none
trace fsdp-no-limiter --model llama3-8b --cluster dgx-a100 --gpus 64 --zero 3 --recompute full --mbs 8 --gbs 512 \
  --no-limit-all-gathers
