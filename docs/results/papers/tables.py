#!/usr/bin/env python3
"""Prints the tables of docs/results.md's first part from the run folders papers.sh writes.

Usage: python3 docs/results/papers/tables.py [RUNS]   (default runs/papers)
"""
import json
import math
import os
import sys

runs = sys.argv[1] if len(sys.argv) > 1 else "runs/papers"


def summary(path):
    with open(os.path.join(runs, path, "summary.json")) as f:
        return {r["name"]: r for r in json.load(f)["results"]}


def mb(b):
    return f"{b / 1e6:.1f} MB" if b < 1e9 else f"{b / 1e9:.2f} GB"


def row(label, r, ref=None):
    ppl = math.exp(r["final_val_loss"])
    cells = [label, f"{r['final_val_loss']:.3f}", f"{ppl:.2f}", f"{r['virtual_time_s']:.0f}",
             mb(r["bytes_sent_per_worker"]), f"{100 * r['compute_utilization']:.0f}%"]
    if ref is not None:
        cells.append(f"{ref['virtual_time_s'] / r['virtual_time_s']:.2f}x")
    print("| " + " | ".join(cells) + " |")


pre = None
try:
    with open(os.path.join(runs, "pretrain", "metrics.jsonl")) as f:
        for line in f:
            m = json.loads(line)
            if "val_loss" in m:
                pre = m["val_loss"]
except OSError:
    pass
print(f"warm start: validation loss {pre:.3f} after 1000 steps\n" if pre else "")

print("### Table 2\n")
print("| entry | val loss | perplexity (bytes) | time (s) | sent/worker | compute | speed-up vs DP |")
print("|---|---|---|---|---|---|---|")
t2 = summary("table2")
base = summary("table2-baseline")["ddp"]
base8 = summary("table2-baseline-8x")["ddp"]
row("baseline: 1 replica, 300 steps", base, t2["ddp"])
row("baseline, 8x updates: 1 replica, 2400 steps", base8, t2["ddp"])
row("data parallel, 8 workers (8x batch), 300 steps", t2["ddp"], t2["ddp"])
row("DiLoCo k = 8, H = 50, 300 steps", t2["diloco-h50"], t2["ddp"])
for name in ("ddp", "diloco-h50"):
    r = t2[name]
    if r.get("time_to_target_s") is not None:
        print(f"\n{name}: time to the worst final loss {r['time_to_target_s']:.0f} s, "
              f"bytes {mb(r.get('bytes_to_target') or 0)}")

print("\n### Table 3\n")
print("| replicas | i.i.d. val loss | non-i.i.d. val loss | time (s) | sent/worker |")
print("|---|---|---|---|---|")
for k in (1, 4, 8, 16, 64):
    if k == 64:
        iid = summary("table3-64").get("diloco-h50")
        non = None
    else:
        iid = summary(f"table3-sweep/count-{k}_sampling-iid").get("diloco-h50")
        non = summary(f"table3-sweep/count-{k}_sampling-non-iid").get("diloco-h50")
    print(f"| {k} | {iid['final_val_loss']:.3f} | {non['final_val_loss']:.3f} | " if non else
          f"| {k} | {iid['final_val_loss']:.3f} | (not run) | ", end="")
    print(f"{iid['virtual_time_s']:.0f} | {mb(iid['bytes_sent_per_worker'])} |")

print("\n### H\n")
print("| entry | val loss | time (s) | sent/worker | compute |")
print("|---|---|---|---|---|")
for name, r in summary("h").items():
    print(f"| {name} | {r['final_val_loss']:.3f} | {r['virtual_time_s']:.0f} | {mb(r['bytes_sent_per_worker'])} | "
          f"{100 * r['compute_utilization']:.0f}% |")

print("\n### Outer learning rate\n")
for m in (2, 8):
    s = summary(f"outer-lr-sweep/count-{m}")
    print(f"\nM = {m}\n\n| H | lr 0.4 | lr 0.7 | lr 1.0 | best |")
    print("|---|---|---|---|---|")
    for h in (10, 50, 100):
        losses = {lr: s[f"h{h}-lr{lr}"]["final_val_loss"] for lr in ("0.4", "0.7", "1.0")}
        best = min(losses, key=losses.get)
        cells = [f"**{v:.3f}**" if lr == best else f"{v:.3f}" for lr, v in losses.items()]
        print(f"| {h} | " + " | ".join(cells) + f" | {best} |")
