#!/usr/bin/env python3
"""Issue 18's H200 targets in one run, for the bare device machine (docs/calibrate.md, "H200").

Run from the project root after `bash gpu-bundle/setup.sh && source gpu-bundle/env.sh`:

    python3 scripts/device-h200.py gpu-bundle/bin "$OUT"

For each model of validation/h200/h200_pytorch_steps.csv (PyTorch steps measured on one H200):
a quick CUDA calibration with the model's shapes and heads (timed: the target is under 2
minutes); then for every row, the predicted step time with the built-in H200 profile and with
the calibrated one, and the executor's measured step on the GPU (cuDNN attention). Writes each
command's output and a summary table (summary.txt, rows.json) under OUT. Standard library only.
"""
import csv
import json
import os
import subprocess
import sys
import time

BIN, OUT = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H200 = os.path.join(ROOT, "validation", "h200")
MPIRUN = os.environ.get("MPIRUN", "mpirun --allow-run-as-root --oversubscribe").split() + ["-np", "1"]
os.makedirs(OUT, exist_ok=True)


def run(name, cmd, timeout):
    """Runs cmd, keeps its output in OUT/name.txt; returns (exit code, stdout, seconds)."""
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        code, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = 124, e.stdout or "", "timed out after %d s" % timeout
    with open(os.path.join(OUT, name + ".txt"), "w") as f:
        f.write("$ " + " ".join(cmd) + "\n" + str(out) + "\n" + str(err))
    return code, out, time.time() - t0


def step_of(code, out, key):
    if code != 0:
        return None
    try:
        j = json.loads(out)
        return j[key]["step_time_s"] if key else j["step_time_s"]
    except (ValueError, KeyError):
        return None


rows = list(csv.DictReader(open(os.path.join(H200, "h200_pytorch_steps.csv"))))
profiles, results = {}, []
for cfg in sorted({r["hf_config"] for r in rows}):
    prof = os.path.join(OUT, "profile-" + cfg)
    code, _, secs = run("calibrate-" + cfg.replace(".json", ""),
                        MPIRUN + [os.path.join(BIN, "shardcast"), "calibrate", "--backend", "cuda", "--quick", "--model",
                                  os.path.join(H200, cfg), "--tp-values", "1", "--out", prof], 300)
    profiles[cfg] = prof if code == 0 else None
    why = ""
    if code != 0:  # the reason: the tool's error line, else the output's last line
        text = open(os.path.join(OUT, "calibrate-" + cfg.replace(".json", "") + ".txt")).read().splitlines()
        errors = [x for x in text if "error:" in x] or [x for x in text if x.strip()][-1:]
        why = errors[0].strip() if errors else ""
    results.append({"calibrate": cfg, "exit": code, "seconds": round(secs, 1), "why": why})
for r in rows:
    model = os.path.join(H200, r["hf_config"])
    # The steps' loss is PyTorch's eager F.cross_entropy on fp32 logits (validation/h200/README.md).
    shape = ["--model", model, "--gpus", "1", "--mbs", r["micro_batch_size"], "--gbs", r["global_batch_size"],
             "--seq", r["seq_len"], "--recompute", r["recompute"], "--cross-entropy", "torch", "--json"]
    sim = [os.path.join(BIN, "shardcast"), "simulate"] + shape
    row = {"row": r["row_id"], "measured_s": float(r["step_time_s"])}
    row["default_s"] = step_of(*run(r["row_id"] + "-default", sim + ["--cluster", "dgx-h200"], 60)[:2], None)
    row["default_fa2_s"] = step_of(*run(r["row_id"] + "-default-fa2", sim + ["--cluster", "dgx-h200",
                                                                             "--attention-kernel", "fa2"], 60)[:2], None)
    prof = profiles[r["hf_config"]]
    if prof:
        row["calibrated_s"] = step_of(*run(r["row_id"] + "-calibrated", sim + ["--profile", prof], 60)[:2], None)
        ex = MPIRUN + [os.path.join(BIN, "shardcast"), "execute", "--backend", "cuda", "--profile", prof, "--steps", "3",
                       "--warmup", "1"] + shape
        code, out, _ = run(r["row_id"] + "-execute", ex, 240)
        row["executed_s"] = step_of(code, out, "measured")
        try:
            row["execute_attention"] = json.loads(out).get("attention") if code == 0 else None
        except ValueError:
            row["execute_attention"] = None
    results.append(row)

with open(os.path.join(OUT, "rows.json"), "w") as f:
    json.dump(results, f, indent=1)
with open(os.path.join(OUT, "summary.txt"), "w") as f:
    for x in results:
        if "calibrate" in x:
            f.write("calibrate %s: exit %s in %s s%s\n" % (x["calibrate"], x["exit"], x["seconds"],
                                                           (": " + x["why"]) if x["why"] else ""))
            continue
        cells = []
        for k in ("default_s", "default_fa2_s", "calibrated_s", "executed_s"):
            v = x.get(k)
            cells.append("%s %s" % (k, "-" if v is None else "%.4f (%+.1f%%)" % (v, 100 * (v / x["measured_s"] - 1))))
        f.write("%s measured %.4f: %s; attention %s\n" % (x["row"], x["measured_s"], ", ".join(cells),
                                                        x.get("execute_attention")))
print(open(os.path.join(OUT, "summary.txt")).read())
sys.exit(0 if all(p for p in profiles.values()) else 1)  # the predictions above print either way
