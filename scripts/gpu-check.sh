#!/usr/bin/env bash
# GPU check, for a machine with one NVIDIA GPU (and the CUDA toolkit with cuBLASLt and NCCL, and
# the Debian packages of scripts/install-deps.sh): builds with CUDA on, runs the GPU tests, a
# quick CUDA calibration, and simulates a small model with the measured profile. Writes
# everything under OUTDIR (default ./gpu-check-out). Meant to finish in under 5 minutes.
set -uo pipefail
OUT="${1:-gpu-check-out}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
log() { echo "[gpu-check $(date +%H:%M:%S)] $*" | tee -a "$OUT/summary.txt"; }
status=0
{ nvidia-smi || true; nvcc --version || true; } > "$OUT/environment.txt" 2>&1
log "building with CUDA (build-gpu/)"
if ! { cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDCAST_CUDA=ON -DSHARDCAST_BUILD_BENCH=OFF \
       && cmake --build build-gpu -j "$(nproc)"; } > "$OUT/build.log" 2>&1; then
  log "BUILD FAILED (see build.log)"; exit 1
fi
log "GPU tests"
./build-gpu/tests/shardcast_tests --gtest_filter='Gpu*:Kernels*:NcclTests*:Fit*' > "$OUT/gpu-tests.log" 2>&1 || status=1
grep -E "PASSED|FAILED|SKIPPED" "$OUT/gpu-tests.log" | tee -a "$OUT/summary.txt"
log "quick CUDA calibration (1 rank)"
MPIRUN="mpirun --allow-run-as-root --oversubscribe -np 1"
if timeout 180 $MPIRUN ./build-gpu/cli/shardcast calibrate --backend cuda --quick --model gpt3-125m --tp-values 1 \
     --out "$OUT/profile.json" \
     > "$OUT/calibrate.log" 2>&1; then
  ./build-gpu/cli/shardcast profile show "$OUT/profile.json" > "$OUT/profile.txt" 2>&1
  head -30 "$OUT/profile.txt" | tee -a "$OUT/summary.txt"
  log "simulate a small GPT on the measured profile"
  ./build-gpu/cli/shardcast simulate --model gpt3-1.3b --profile "$OUT/profile.json" --gpus 1 --mbs 1 --gbs 8 \
      --seq 2048 > "$OUT/simulate.txt" 2>&1 || status=1
  head -12 "$OUT/simulate.txt" | tee -a "$OUT/summary.txt"
  log "execute GPT-3 125M on the GPU (TP=PP=DP=1, 8 micro-batches) against the prediction"
  timeout 120 $MPIRUN ./build-gpu/cli/shardcast execute --backend cuda --model gpt3-125m --profile "$OUT/profile.json" \
      --mbs 1 --gbs 8 --seq 1024 --steps 3 --warmup 1 > "$OUT/execute.txt" 2>&1 || status=1
  head -20 "$OUT/execute.txt" | tee -a "$OUT/summary.txt"
else
  log "CALIBRATION FAILED (see calibrate.log)"; tail -5 "$OUT/calibrate.log" | tee -a "$OUT/summary.txt"; status=1
fi
log "done, status $status"
exit $status
