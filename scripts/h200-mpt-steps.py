#!/usr/bin/env python3
"""Times MPT-shaped training steps on one GPU with eager PyTorch, and where their kernel time goes.

    python3 scripts/h200-mpt-steps.py OUTDIR            (a CUDA GPU and PyTorch)

What for: the MPT rows of validation/published_runs.csv (S14, llm-foundry on H100) have no
measured per-op times. One H200 has the H100's bf16 peak (989 TFLOP/s dense), so a step of the
same layer shapes on it checks shardcast's compute model of those layers (GEMM rates at their
shapes, flash attention, the memory-bound ops) apart from the cluster's communication.
docs/accuracy.md ("MPT's layers on one H200") compares the figures with `shardcast simulate --cluster
dgx-h200 --gpus 1` of the same models (validation/h200/mpt-*.json).

The models, as llm-foundry builds the released MPTs (no biases, LayerNorm without bias, fused
Wqkv, GeLU MLP of 4h, tied embeddings, 50368-token vocabulary; the benchmark yamls behind rows
205-219 keep biases and learned positions, MPTConfig's defaults): MPT-3b whole (32 layers, d 2560, 20 heads,
micro-batch 8, no recompute, as rows 217-219 ran), and the first layers of MPT-13b (d 5120, 40
heads, micro-batch 16) and MPT-70b (d 8192, 64 heads, micro-batch 8) with full recompute
(torch.utils.checkpoint around each layer), as rows 205-213 ran. Sequence 2048. bf16 weights and
compute, bf16 gradients cast to fp32 for a fused AdamW on an fp32 master copy (FSDP's DEFAULT
mixed precision on one rank, without the sharding); attention through
scaled_dot_product_attention(is_causal=True), whichever backend PyTorch picks (2.11 on an H200
picked cuDNN's fused flash attention; llm-foundry's benchmark MPTs run FlashAttention-2 (learned positions),
which this leaves out); the loss
as F.cross_entropy on fp32 logits (llm-foundry uses flash-attn's fused loss; simulate with
--cross-entropy torch).

Timing: the whole step between two torch.cuda.synchronize(), 2 warm-up steps, the median of the
next 5; the forward and backward alone likewise. One more step under torch.profiler gives the
CUDA kernels' total time by class (GEMM, attention, other: `classify`) and the 25 largest kernels.
Writes OUTDIR/mpt_steps.json (atomically) and prints a summary; exits 2 without PyTorch or a CUDA
GPU. Standard library and torch only.
"""
import json
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
except ImportError as e:
    print("h200-mpt-steps: needs PyTorch (%s)" % e, file=sys.stderr)
    sys.exit(2)

VOCAB = 50368
SEQ = 2048
MODELS = [
    # name, layers, hidden, heads, micro-batch, full recompute
    ("mpt-3b", 32, 2560, 20, 8, False),
    ("mpt-13b-6l", 6, 5120, 40, 16, True),
    ("mpt-70b-2l", 2, 8192, 64, 8, True),
]


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.norm_1 = nn.LayerNorm(d, bias=False)
        self.wqkv = nn.Linear(d, 3 * d, bias=False)
        self.out_proj = nn.Linear(d, d, bias=False)
        self.norm_2 = nn.LayerNorm(d, bias=False)
        self.up_proj = nn.Linear(d, 4 * d, bias=False)
        self.down_proj = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        qkv = self.wqkv(self.norm_1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = (y.transpose(1, 2) for y in qkv.unbind(2))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out_proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down_proj(F.gelu(self.up_proj(self.norm_2(x))))


class Mpt(nn.Module):
    def __init__(self, layers, d, heads, recompute):
        super().__init__()
        self.recompute = recompute
        self.wte = nn.Embedding(VOCAB, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm_f = nn.LayerNorm(d, bias=False)

    def forward(self, tokens, labels):
        x = self.wte(tokens)
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if self.recompute else blk(x)
        logits = F.linear(self.norm_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, VOCAB), labels.view(-1))


def classify(name):
    n = name.lower()
    if "flash" in n or "fmha" in n or "attention" in n or "cudnn" in n:  # cuDNN's SDPA and its helpers
        return "attention"
    if any(k in n for k in ("gemm", "nvjet", "cutlass", "xmma", "sm90_", "sm80_", "cublas")):
        return "gemm"
    return "other"


def kernel_table(prof):
    totals = {}
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = getattr(e, "cuda_time_total", 0)
        if e.device_type is not None and str(e.device_type).endswith("CUDA") and t > 0:
            totals[e.key] = (totals.get(e.key, (0, 0))[0] + t, e.count)
    classes = {}
    for k, (t, _) in totals.items():
        classes[classify(k)] = classes.get(classify(k), 0) + t / 1e6
    top = sorted(totals.items(), key=lambda kv: -kv[1][0])[:25]
    return classes, [{"kernel": k[:160], "total_s": t / 1e6, "calls": c} for k, (t, c) in top]


def measure(name, layers, d, heads, mbs, recompute):
    torch.manual_seed(0)
    model = Mpt(layers, d, heads, recompute).cuda().to(torch.bfloat16)
    params = [p for p in model.parameters()]
    master = [p.detach().float().clone().requires_grad_(True) for p in params]
    opt = torch.optim.AdamW(master, lr=1e-4, fused=True)
    tokens = torch.randint(0, VOCAB, (mbs, SEQ), device="cuda")
    labels = torch.randint(0, VOCAB, (mbs, SEQ), device="cuda")

    def fwd_bwd():
        model(tokens, labels).backward()

    def step():
        fwd_bwd()
        for p, m in zip(params, master):
            m.grad = p.grad.float()
            p.grad = None
        opt.step()
        for p, m in zip(params, master):
            m.grad = None
            p.data.copy_(m.data)

    def timed(fn, n):
        out = []
        for _ in range(n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            out.append(time.perf_counter() - t0)
        return out

    timed(step, 2)
    steps = timed(step, 5)
    fb = timed(lambda: (fwd_bwd(), [setattr(p, "grad", None) for p in params]), 5)
    torch.cuda.reset_peak_memory_stats()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    classes, top = kernel_table(prof)
    r = {"model": name, "layers": layers, "hidden": d, "heads": heads, "micro_batch": mbs,
         "seq": SEQ, "recompute": "full" if recompute else "none",
         "params": sum(p.numel() for p in params),
         "step_s": statistics.median(steps), "steps_s": steps,
         "fwd_bwd_s": statistics.median(fb), "fwd_bwd_runs_s": fb,
         "kernel_s_by_class": classes, "top_kernels": top,
         "max_allocated_bytes": torch.cuda.max_memory_allocated()}
    del model, master, opt, params
    torch.cuda.empty_cache()
    return r


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if not torch.cuda.is_available():
        print("h200-mpt-steps: no CUDA GPU", file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "gpu": torch.cuda.get_device_name(0), "sdpa_flash": torch.backends.cuda.flash_sdp_enabled()}
    rows = []
    for m in MODELS:
        r = measure(*m)
        rows.append(r)
        print("%-12s step %.4f s  fwd+bwd %.4f s  kernels %s  max allocated %.1f GiB" % (
            r["model"], r["step_s"], r["fwd_bwd_s"],
            " ".join("%s %.4f" % kv for kv in sorted(r["kernel_s_by_class"].items())),
            r["max_allocated_bytes"] / 2**30), flush=True)
    tmp = os.path.join(out, "mpt_steps.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"environment": env, "rows": rows}, f, indent=1)
    os.replace(tmp, os.path.join(out, "mpt_steps.json"))


if __name__ == "__main__":
    main()
