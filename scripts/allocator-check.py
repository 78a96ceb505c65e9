#!/usr/bin/env python3
"""Checks shardcast's model of PyTorch's CUDA caching allocator against the allocator itself.

Needs a CUDA GPU and PyTorch. For each trace that `shardcast simulate --allocator-trace` wrote
(scripts/allocator-traces.sh writes a set), replays every stage's allocator calls through
PyTorch's own caching allocator (one torch.empty of the request's bytes per allocation, freed
when the trace frees it) and compares what PyTorch reports (torch.cuda.memory_stats: peak
allocated and reserved bytes, peak segments, num_alloc_retries, num_ooms) with what the model
made of the same calls (the trace's "model" object):
  - "unlimited": the whole device available (skipped where the model's peak exceeds free memory);
  - "at_capacity": the stage's capacity as PyTorch's per-process memory fraction, where that limit
    binds (the model's unlimited peak exceeds it) and the device has that much free;
  - "squeezed": a limit halfway between the allocated and the reserved peak, which makes the
    allocator release its cache (num_alloc_retries), to check that rule on every trace.
A trace's gathers on their own stream (FSDP without its rate limiter) are allocated on a side
stream; blocks freed with record_stream wait for a sleep kernel queued on the compute stream,
which is synchronized where the trace processes events (the end of a pass).

    python3 scripts/allocator-check.py OUTDIR TRACE.json...
    ALLOCATOR_RECORD="row144:0:squeezed" python3 scripts/allocator-check.py ...   (PyTorch's own
        trace of that replay, memory._record_memory_history, to OUTDIR/torch-row144-0-squeezed.json)

Writes OUTDIR/allocator-check.json and OUTDIR/allocator-check.txt (also printed). Exit 0 unless a
trace cannot be read. docs/simulator.md, "Reserved memory". Standard library and torch only.
"""
import json
import os
import sys
import time

import torch

GiB = float(1 << 30)
SLEEP_CYCLES = 400_000_000  # about 0.2 s at the H200's 1.98 GHz: longer than a pass's replay
STATS = ("peak_allocated_bytes", "peak_reserved_bytes", "peak_segments", "retries", "ooms")


def fraction_of(capacity):
    """The memory fraction that makes PyTorch's limit exactly `capacity` bytes: the allocator takes
    floor(fraction * totalGlobalMem) (CUDACachingAllocator.cpp, setMemoryFraction; cudaMemGetInfo's
    total before PyTorch 2.9, the same figure on these GPUs)."""
    return min(1.0, (capacity + 0.5) / torch.cuda.get_device_properties(0).total_memory)


def replay(events, fraction, side, record=None):
    """Replays events with the allocator limited to `fraction` of the device; returns its stats.
    `record`: a file to write PyTorch's own trace of the replay to (memory._record_memory_history:
    [action, address, size] per allocator event)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(fraction)
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    if torch.cuda.memory_reserved() != 0:
        raise RuntimeError("the allocator holds memory before the replay")
    compute = torch.cuda.current_stream()
    live, sleeping = {}, False
    if record:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=2_000_000)
    for e in events:
        kind = e[0]
        if kind == 0:  # allocate
            try:
                if e[3] == 0:
                    t = torch.empty(e[2], dtype=torch.uint8, device="cuda")
                else:
                    with torch.cuda.stream(side):
                        t = torch.empty(e[2], dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError:
                t = None
            if t is not None and e[1] >= 0:
                live[e[1]] = t
            t = None
        elif kind == 1:  # free
            live.pop(e[1], None)
        elif kind == 2:  # used on the compute stream (record_stream), then freed
            t = live.pop(e[1], None)
            if t is not None:
                if not sleeping:
                    torch.cuda._sleep(SLEEP_CYCLES)
                    sleeping = True
                t.record_stream(compute)
                t = None
        elif kind == 3:  # the other stream's work is done
            if sleeping:
                compute.synchronize()
                sleeping = False
    live.clear()
    torch.cuda.synchronize()
    if record:
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        with open(record, "w") as f:
            json.dump([[e.get("action"), e.get("addr"), e.get("size")] for e in snap["device_traces"][0]], f)
    s = torch.cuda.memory_stats()
    stats = {
        "peak_allocated_bytes": s["allocated_bytes.all.peak"],
        "peak_reserved_bytes": s["reserved_bytes.all.peak"],
        "peak_segments": s["segment.all.peak"],
        "retries": s["num_alloc_retries"],
        "ooms": s["num_ooms"],
    }
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(1.0)
    return stats


def check_stage(name, st, side, records):
    """Rows of (trace, stage, mode, model stats, measured stats or the reason it was skipped).
    `records`: {"NAME:STAGE:MODE": file} replays whose PyTorch trace is kept."""
    rows = []
    events = st["events"]
    model = st["model"]
    free = torch.cuda.mem_get_info()[0]
    unl = model["unlimited"]
    if unl["peak_reserved_bytes"] < free - GiB:
        t0 = time.time()
        rec = records.get("%s:%d:unlimited" % (name, st["stage"]))
        rows.append((name, st["stage"], "unlimited", unl, replay(events, 1.0, side, rec), time.time() - t0))
    else:
        rows.append((name, st["stage"], "unlimited", unl, "peak larger than this GPU's free memory", 0.0))
    limits = [("at_capacity", st["capacity_bytes"]), ("squeezed", st.get("squeezed_capacity_bytes"))]
    for mode, cap in limits:
        if model.get(mode) is None or cap is None or unl["peak_reserved_bytes"] <= cap:
            continue  # no limit, or one that does not bind: the unlimited replay's figures
        if cap < free - GiB:
            t0 = time.time()
            rec = records.get("%s:%d:%s" % (name, st["stage"], mode))
            rows.append((name, st["stage"], mode, model[mode], replay(events, fraction_of(cap), side, rec),
                         time.time() - t0))
        else:
            rows.append((name, st["stage"], mode, model[mode], "capacity larger than this GPU's free memory", 0.0))
    return rows


def describe(rows):
    out = ["%-18s %5s %-11s %9s %9s %9s %9s %8s %6s %6s" % (
        "trace", "stage", "mode", "alloc GiB", "model", "resv GiB", "model", "segs", "retry", "oom")]
    same = differ = 0
    for name, stage, mode, model, measured, _ in rows:
        if isinstance(measured, str):
            out.append("%-18s %5d %-11s skipped: %s" % (name, stage, mode, measured))
            continue
        equal = all(model[k] == measured[k] for k in STATS)
        same += equal
        differ += not equal
        out.append("%-18s %5d %-11s %9.3f %9.3f %9.3f %9.3f %4d/%-3d %3d/%-2d %3d/%-2d %s" % (
            name, stage, mode, measured["peak_allocated_bytes"] / GiB, model["peak_allocated_bytes"] / GiB,
            measured["peak_reserved_bytes"] / GiB, model["peak_reserved_bytes"] / GiB,
            measured["peak_segments"], model["peak_segments"], measured["retries"], model["retries"],
            measured["ooms"], model["ooms"], "same" if equal else "DIFFERS"))
    out.append("%d replays equal to the model in every figure, %d differ (figures: PyTorch, then the model)" % (same, differ))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    outdir, traces = sys.argv[1], sys.argv[2:]
    os.makedirs(outdir, exist_ok=True)
    # ALLOCATOR_RECORD="row144:0:squeezed row34:0:squeezed": keep PyTorch's own trace of those
    # replays (OUTDIR/torch-NAME-STAGE-MODE.json) to compare block by block.
    records = {k: os.path.join(outdir, "torch-%s.json" % k.replace(":", "-"))
               for k in os.environ.get("ALLOCATOR_RECORD", "").split()}
    total = torch.cuda.get_device_properties(0).total_memory
    env = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "total_memory_bytes": total,
        "allocator_backend": torch.cuda.get_allocator_backend(),
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    }
    side = torch.cuda.Stream()
    torch.empty(1, device="cuda")  # the CUDA context first
    rows = []
    for path in traces:
        with open(path) as f:
            trace = json.load(f)
        if not isinstance(trace, dict) or trace.get("format") != "shardcast-allocator-trace/1":
            sys.exit("%s: not an allocator trace (format %r; expected shardcast-allocator-trace/1)"
                     % (path, trace.get("format") if isinstance(trace, dict) else None))
        name = os.path.splitext(os.path.basename(path))[0]
        for st in trace["stages"]:
            rows += check_stage(name, st, side, records)
    lines = ["%s: %s" % (k, v) for k, v in env.items()] + describe(rows)
    with open(os.path.join(outdir, "allocator-check.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(outdir, "allocator-check.json"), "w") as f:
        json.dump({"environment": env, "rows": [
            {"trace": n, "stage": s, "mode": m, "model": mo, "pytorch": me, "seconds": sec}
            for n, s, m, mo, me, sec in rows]}, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
