#!/usr/bin/env bash
# Accuracy of the closed loop on CPU ranks: calibrate, then execute a tiny GPT with TP2, PP2 and
# DP2 on 2 MPI ranks, printing predicted vs measured step time. The figures depend on what else
# the machine runs, which is why they live here and in docs/accuracy.md, not in a test.
# Run: make build && bash bench/execute_loop.sh [BUILD_DIR]
set -euo pipefail
build="${1:-build}"
bin="$(cd "$build" && pwd)/cli/shardcast"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/tiny.json" <<'JSON'
{"name": "tiny-gpt", "num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024,
 "num_attention_heads": 4, "vocab_size": 2048, "seq_length": 128, "normalization": "layernorm",
 "activation": "gelu", "position_embedding": "learned", "tie_embeddings": true, "source": "bench"}
JSON
mpirun=(mpirun --allow-run-as-root --oversubscribe -np 2)
"${mpirun[@]}" "$bin" calibrate --backend cpu --quick --model "$work/tiny.json" --tp-values 1,2 \
  --out "$work/cpu.json" 2>/dev/null
printf '%-8s %12s %12s %8s\n' config predicted_s measured_s error
for cfg in "--tp 2" "--pp 2" "--dp 2"; do
  flags="$cfg"
  [ "$cfg" = "--dp 2" ] && flags=""
  "${mpirun[@]}" "$bin" execute --model "$work/tiny.json" --profile "$work/cpu.json" $flags \
    --mbs 1 --gbs 8 --steps 5 --warmup 1 --json > "$work/out.json"
  python3 - "$cfg" "$work/out.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[2]))
p, m = j["predicted"]["step_time_s"], j["measured"]["step_time_s"]
print(f"{sys.argv[1]:<8} {p:12.4f} {m:12.4f} {100 * (p / m - 1):+7.1f}%")
PY
done
