#!/usr/bin/env python3
"""Checks shardcast's model of PyTorch's CUDA caching allocator against the allocator itself.

    python3 scripts/allocator-check.py OUTDIR TRACE.json...             (a CUDA GPU and PyTorch)
    python3 scripts/allocator-check.py --compare RESULTS.json TRACE.json...   (no GPU, no torch)

For each trace that `shardcast simulate --allocator-trace` wrote (scripts/allocator-traces.sh
writes a set), the first form replays every stage's allocator calls through PyTorch's own caching
allocator (one torch.empty of the request's bytes per allocation, freed when the trace frees it)
and compares what PyTorch reports (torch.cuda.memory_stats: peak allocated and reserved bytes,
peak segments, num_alloc_retries, num_ooms) with what the model made of the same calls (the
trace's "model" object). Each stage runs:
  - "unlimited": the whole device (skipped where the model's peak exceeds free memory);
  - "at_capacity": the stage's capacity as PyTorch's per-process memory fraction, where that limit
    binds (the model's unlimited peak exceeds it) and the device has that much free;
  - "squeezed": a limit halfway between the allocated and the reserved peak, which makes the
    allocator release its cache (num_alloc_retries), to check that rule on every trace.
Allocations on another stream (FSDP's gathers without its rate limiter) come from a side stream
of that id; blocks freed with record_stream wait for a sleep kernel queued on the compute stream,
synchronized where the trace processes events (the end of a pass). A replay whose sleep ended
before that point is marked "early" (the blocks returned sooner than the trace says).

Writes OUTDIR/allocator-check.json (the environment, and per replay the trace, stage, mode,
capacity and both sets of figures) and OUTDIR/allocator-check.txt (also printed), in bytes.
    ALLOCATOR_RECORD="row144:0:squeezed ..." also keeps PyTorch's own trace of those replays
    (memory._record_memory_history: [action, address, size]) in OUTDIR/torch-NAME-STAGE-MODE.json.

The --compare form prints the same table from a results file's PyTorch figures and the given
traces' model figures (after a change to the allocator model, without a GPU). The traces must be
the calls PyTorch replayed: a results row's fingerprint (allocations and their bytes, and a SHA-256
of the whole call sequence where the row has one) is checked.

Exit 0 when every replay agrees, 1 when one differs, 2 on bad input or no GPU.
docs/simulator.md, "Reserved memory". Standard library and torch only.
"""
import hashlib
import json
import os
import sys
import time

GiB = float(1 << 30)
SLEEP_CYCLES = 400_000_000  # about 0.2 s at the H200's 1.98 GHz: longer than a pass's replay
STATS = ("peak_allocated_bytes", "peak_reserved_bytes", "peak_segments", "retries", "ooms")
FORMAT = "shardcast-allocator-trace/1"


def fail(message):
    print("allocator-check: " + message, file=sys.stderr)
    sys.exit(2)


def load_traces(paths):
    """{name: trace} for every path, checked before any replay: exit 2 naming the file and field."""
    traces = {}
    for path in paths:
        try:
            with open(path) as f:
                trace = json.load(f)
        except (OSError, ValueError) as e:
            fail("%s: %s" % (path, e))
        if not isinstance(trace, dict) or trace.get("format") != FORMAT:
            fail("%s: format: got %r, expected %s (simulate --allocator-trace)"
                 % (path, trace.get("format") if isinstance(trace, dict) else None, FORMAT))
        for i, st in enumerate(trace.get("stages", [])):
            for key in ("stage", "capacity_bytes", "model", "events"):
                if key not in st:
                    fail("%s: stages[%d]: no %r" % (path, i, key))
            if not isinstance(st["model"], dict) or "unlimited" not in st["model"]:
                fail("%s: stages[%d].model: no 'unlimited' figures" % (path, i))
        traces[os.path.splitext(os.path.basename(path))[0]] = trace
    return traces


def fingerprint(events):
    """What identifies a stage's calls: its allocations and their bytes, and a SHA-256 of the whole
    call sequence in order (allocations, frees, and the process-events marks, which matter where
    blocks wait on record_stream). A check compares the keys a results row has."""
    allocs = [e for e in events if e[0] == 0]
    digest = hashlib.sha256(json.dumps(events, separators=(",", ":")).encode()).hexdigest()
    return {"allocations": len(allocs), "bytes": sum(e[2] for e in allocs), "sha256": digest}


def same_calls(recorded, now):
    """Whether a results row's fingerprint matches `now`, a stage's fingerprint (on the keys the
    row records)."""
    return all(now.get(k) == v for k, v in recorded.items())


def limits(st):
    """(mode, capacity bytes or None) of the replays a stage gets; a limit that does not bind
    (the model's unlimited peak within it) is the unlimited replay and is left out."""
    out = [("unlimited", None)]
    peak = st["model"]["unlimited"]["peak_reserved_bytes"]
    for mode, cap in (("at_capacity", st["capacity_bytes"]), ("squeezed", st.get("squeezed_capacity_bytes"))):
        if st["model"].get(mode) is not None and cap is not None and peak > cap:
            out.append((mode, cap))
    return out


def describe(rows):
    """The table: per replay PyTorch's figure, then the model's, in bytes."""
    out = ["%-16s %5s %-11s %25s %25s %9s %9s %9s  %s" % (
        "trace", "stage", "mode", "peak allocated B", "peak reserved B", "segments", "retries", "ooms",
        "PyTorch / model")]
    same = differ = 0
    for r in rows:
        measured, model = r["pytorch"], r["model"]
        if isinstance(measured, str):
            out.append("%-16s %5d %-11s skipped: %s" % (r["trace"], r["stage"], r["mode"], measured))
            continue
        equal = all(model[k] == measured[k] for k in STATS)
        same += equal
        differ += not equal
        pair = lambda k: "%d/%d" % (measured[k], model[k])
        out.append("%-16s %5d %-11s %25s %25s %9s %9s %9s  %s%s" % (
            r["trace"], r["stage"], r["mode"], pair("peak_allocated_bytes"), pair("peak_reserved_bytes"),
            pair("peak_segments"), pair("retries"), pair("ooms"), "same" if equal else "DIFFERS",
            " (early)" if r.get("early") else ""))
    out.append("%d replays equal to the model in every figure, %d differ" % (same, differ))
    return out, differ


def compare(results_path, traces):
    """--compare: the results file's PyTorch figures beside the traces' model figures."""
    try:
        with open(results_path) as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (results_path, e))
    rows, other, fingerprints = [], set(), {}
    for r in results.get("rows", []):
        trace = traces.get(r.get("trace"))
        if trace is None:
            continue
        st = [s for s in trace["stages"] if s["stage"] == r.get("stage")]
        if not st or st[0]["model"].get(r.get("mode")) is None:
            fail("%s: %s stage %s: no model figures for mode %r" % (results_path, r.get("trace"), r.get("stage"),
                                                                   r.get("mode")))
        key = (r["trace"], r["stage"])
        if key not in fingerprints:  # once per stage: it hashes every call
            fingerprints[key] = fingerprint(st[0]["events"])
        if "fingerprint" in r and not same_calls(r["fingerprint"], fingerprints[key]):
            other.add("%s stage %s" % (r["trace"], r["stage"]))
        rows.append(dict(r, model=st[0]["model"][r["mode"]]))
    if other:
        fail("not the calls PyTorch replayed (another simulate made these traces; the results say which): "
             + ", ".join(sorted(other)))
    env = ["# %s: %s" % (k, v) for k, v in results.get("environment", {}).items()]
    lines, differ = describe(rows)
    print("\n".join(env + lines))
    return differ


def replay(torch, events, fraction, streams, record=None):
    """Replays events with the allocator limited to `fraction` of the device; returns its stats
    and whether a record_stream hold ended before the trace's process-events point."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(fraction)
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    if torch.cuda.memory_reserved() != 0:
        raise RuntimeError("the allocator holds memory before the replay")
    compute = torch.cuda.current_stream()
    live, held, early = {}, None, False
    if record:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=2_000_000)
    for e in events:
        kind = e[0]
        if kind == 0:  # allocate
            try:
                if e[3] == 0:
                    t = torch.empty(e[2], dtype=torch.uint8, device="cuda")
                else:
                    if e[3] not in streams:
                        streams[e[3]] = torch.cuda.Stream()
                    with torch.cuda.stream(streams[e[3]]):
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
                if held is None:  # the compute stream busy until the trace's process-events point
                    torch.cuda._sleep(SLEEP_CYCLES)
                    held = torch.cuda.Event()
                    held.record(compute)
                t.record_stream(compute)
                t = None
        elif kind == 3 and held is not None:  # the other stream's work is done
            early = early or held.query()
            compute.synchronize()
            held = None
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
    return stats, early


def run_on_gpu(outdir, traces):
    try:
        import torch
    except ImportError:
        fail("PyTorch is not installed (the --compare form needs none)")
    if not torch.cuda.is_available():
        fail("no CUDA GPU visible to PyTorch")
    os.makedirs(outdir, exist_ok=True)
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
    torch.empty(1, device="cuda")  # the CUDA context first
    streams, rows = {}, []
    for name, trace in traces.items():
        for st in trace["stages"]:
            calls = fingerprint(st["events"])  # once per stage: it hashes every call
            for mode, cap in limits(st):
                row = {"trace": name, "stage": st["stage"], "mode": mode, "capacity_bytes": cap,
                       "fingerprint": calls, "model": st["model"][mode]}
                need = st["model"]["unlimited"]["peak_reserved_bytes"] if cap is None else cap
                if need >= torch.cuda.mem_get_info()[0] - GiB:
                    row["pytorch"] = "needs more than this GPU's free memory"
                else:
                    # PyTorch's limit is floor(fraction * totalGlobalMem) (setMemoryFraction;
                    # cudaMemGetInfo's total before 2.9, the same figure here): exactly cap bytes.
                    fraction = 1.0 if cap is None else min(1.0, (cap + 0.5) / total)
                    t0 = time.time()
                    row["pytorch"], row["early"] = replay(torch, st["events"], fraction, streams,
                                                          records.get("%s:%d:%s" % (name, st["stage"], mode)))
                    row["seconds"] = time.time() - t0
                rows.append(row)
    lines, differ = describe(rows)
    lines = ["# %s: %s" % (k, v) for k, v in env.items()] + lines
    with open(os.path.join(outdir, "allocator-check.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(outdir, "allocator-check.json"), "w") as f:
        json.dump({"environment": env, "rows": rows}, f, indent=1)
    print("\n".join(lines))
    return differ


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if sys.argv[1] == "--compare":
        if len(sys.argv) < 4:
            fail("--compare RESULTS.json TRACE.json...")
        differ = compare(sys.argv[2], load_traces(sys.argv[3:]))
    else:
        differ = run_on_gpu(sys.argv[1], load_traces(sys.argv[2:]))
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
