#!/usr/bin/env python3
"""Checks a dp_worker --trace file (Chrome trace event JSON) and --metrics file (JSON lines),
independently of the C code that wrote them: python's json module parses them.
Usage: trace_check.py TRACE METRICS RANKS STEPS overlap|no-overlap|device|exact|zero3
(device: a GPU run, whose module passes are also in the device lane, timed by CUDA events;
exact: an --exact run, each row group's add a span and each step's exact sums a collective;
zero3: ZeRO-3 under a budget smaller than a layer, its blocks gathered for every pass.)
Exit 0 when every property holds; prints each failure."""
import json
import sys

trace_path, metrics_path, ranks, steps, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
failures = []


def expect(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


with open(trace_path) as f:
    trace = json.load(f)
events = trace["traceEvents"]
spans = [e for e in events if e.get("ph") == "X"]
expect(all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 for e in spans), "every span has a time and a duration >= 0")
expect({e["pid"] for e in spans} == set(range(ranks)), f"spans from every one of the {ranks} ranks")
names = {e["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
expect(names == {"process_name"} and sum(e.get("name") == "process_name" for e in events) == ranks,
       "one process_name per rank")
expect(not any("dropped" in e.get("args", {}).get("name", "") for e in events if e.get("name") == "process_name"),
       "no rank's trace dropped spans (its capacity holds every step)")
for rank in range(ranks):
    mine = [e for e in spans if e["pid"] == rank]
    cats = {}
    for e in mine:
        cats.setdefault(e["cat"], []).append(e)
    for cat in ("data", "forward", "backward", "collective", "optimizer"):
        expect(len(cats.get(cat, [])) >= steps, f"rank {rank}: at least {steps} '{cat}' spans")
    expect(all(e["tid"] == 1 for e in cats.get("collective", [])), f"rank {rank}: collectives in the communication lane")
    expect(all(e["tid"] in (0, 2) for e in cats.get("backward", [])), f"rank {rank}: module passes in the compute (or device) lane")
    # A collective overlaps backward when it starts before some backward span of its step ends:
    # with overlap, buckets start as backward finishes them; without, after the whole backward.
    backward = [e for e in cats.get("backward", []) if e["tid"] == 0]
    overlapping = 0
    for c in cats.get("collective", []):
        if any(b["ts"] < c["ts"] + c["dur"] and c["ts"] < b["ts"] + b["dur"] for b in backward):
            overlapping += 1
    if mode == "overlap":
        expect(overlapping >= steps, f"rank {rank}: {overlapping} collective spans overlap backward spans")
    elif mode == "exact":
        first_layer = [e for e in cats.get("backward", []) if e["name"].startswith("backward layers.0 ")]
        expect(len(cats.get("exact", [])) == len(first_layer) >= 2 * steps,
               f"rank {rank}: one exact add per row group ({len(cats.get('exact', []))} for {len(first_layer)} groups)")
        expect(len(cats.get("collective", [])) == steps, f"rank {rank}: one span of the exact sums per step")
    elif mode == "zero3":
        passes = [e for e in cats.get("forward", []) + cats.get("backward", []) if e["name"].endswith("(linear)")]
        expect(len(cats.get("collective", [])) > len(passes),
               f"rank {rank}: more gathers than Linear passes ({len(cats.get('collective', []))} for {len(passes)})")
    elif mode == "no-overlap":
        expect(overlapping == 0, f"rank {rank}: no collective span overlaps a backward span (--no-overlap)")
    # The device lane: on a GPU every host pass has its device twin, in issue order, none
    # overlapping the next (one stream), each ending after its host span began (the host only
    # queues the work); on the CPU no device lane at all.
    device = sorted((e for e in mine if e["tid"] == 2), key=lambda e: e["ts"])
    evaluations = [e for e in mine if e["cat"] == "evaluate"]  # their passes are not timed on the device
    host = [e for e in mine if e["tid"] == 0 and e["cat"] in ("forward", "backward")
            and not any(v["ts"] <= e["ts"] <= v["ts"] + v["dur"] for v in evaluations)]
    if mode == "device":
        expect(len(device) == len(host), f"rank {rank}: {len(device)} device-lane passes for {len(host)} host passes")
        expect([e["name"] for e in device] == [e["name"] for e in sorted(host, key=lambda e: e["ts"])],
               f"rank {rank}: the device ran the passes in the host's order")
        expect(all(a["ts"] + a["dur"] <= b["ts"] + 1e-3 for a, b in zip(device, device[1:])),
               f"rank {rank}: device passes do not overlap (one stream)")
    else:
        expect(not device, f"rank {rank}: no device lane on the CPU")

keys = {"step", "epoch", "loss", "samples_per_s", "ms_per_step", "forward_ms", "backward_ms", "exposed_comm_ms",
        "optimizer_ms", "comm_ms", "hidden_comm_ms", "lr"}
with open(metrics_path) as f:
    lines = [json.loads(line) for line in f]
steps_logged = [m for m in lines if "step" in m]
expect([m["step"] for m in steps_logged] == list(range(1, steps + 1)), f"metrics: one object per step 1..{steps}")
expect(all(keys <= set(m) for m in steps_logged), "metrics: every step has " + ", ".join(sorted(keys)))
expect(all(m["hidden_comm_ms"] <= m["comm_ms"] + 1e-9 and m["loss"] > 0 for m in steps_logged),
       "metrics: hidden <= total communication, positive losses")
expect(len(lines) == steps + 1 and "summary" in lines[-1], "metrics: a summary object last")
sys.exit(1 if failures else 0)
