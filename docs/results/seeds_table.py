#!/usr/bin/env python3
"""Tables of docs/results.md Part 2's claims over seeds, from the runs of seeds.sh.

Usage: python3 docs/results/seeds_table.py [FOLDER]   (default runs/results-seeds)

Each entry's final validation loss is the mean ± 95% t half-width over the seeds; each gap is
paired by seed (the same initialisation and batches), with its 95% t-interval and the verdict of
docs/methods.md for the claim the row names: holds when the interval excludes zero on the claimed
side, fails when on the other, else inconclusive. A part whose runs are not all finished is left out.
"""
import importlib.util
import json
import math
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("scaling_table", os.path.join(_here, "..", "scaling", "table.py"))
_scaling_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_scaling_table)
mean_hw = _scaling_table.mean_hw

folder = sys.argv[1] if len(sys.argv) > 1 else "runs/results-seeds"


def seed_losses(run):
    """{entry: {seed: final loss}} from a run folder's seed-k summaries."""
    out = {}
    path = os.path.join(folder, run)
    for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        summary = os.path.join(path, name, "summary.json")
        if name.startswith("seed-") and os.path.exists(summary):
            with open(summary) as f:
                for r in json.load(f)["results"]:
                    out.setdefault(r["name"], {})[int(name[5:])] = r["final_val_loss"]
    return out


def cell(values):
    m, h = mean_hw(list(values))
    return f"{m:.3f}" if math.isnan(h) else f"{m:.3f} ± {h:.3f}"


def gap(a, b, sign):
    """b - a paired by seed, its interval, and the verdict on the claim that it has sign `sign`."""
    seeds = sorted(set(a) & set(b))
    m, h = mean_hw([b[k] - a[k] for k in seeds])
    if math.isnan(h):
        verdict = "inconclusive"
    elif sign * m - h > 0:
        verdict = "holds"
    elif sign * m + h < 0:
        verdict = "fails"
    else:
        verdict = "inconclusive"
    return f"{m:+.3f} [{m - h:+.3f}, {m + h:+.3f}]", verdict, len(seeds)


def complete(losses, entries, seeds=3):
    return all(len(losses.get(e, {})) >= seeds for e in entries)


dropped = seed_losses("dropped")
if complete(dropped, ["drop-0", "drop-30", "drop-50"]):
    print("Dropped outer gradients (DiLoCo, 4 workers, H = 50):\n")
    print("| p | final val loss | − p = 0, paired | the drops cost loss |")
    print("|---|---|---|---|")
    print(f"| 0 | {cell(dropped['drop-0'].values())} | | |")
    for name, p in (("drop-30", "0.3"), ("drop-50", "0.5")):
        text, verdict, _ = gap(dropped["drop-0"], dropped[name], +1)
        print(f"| {p} | {cell(dropped[name].values())} | {text} | {verdict} |")
    print()

iid, non_iid = seed_losses("non-iid-sweep/sampling-iid"), seed_losses("non-iid-sweep/sampling-non-iid")
entries = sorted(set(iid) & set(non_iid))
if entries and complete(iid, entries) and complete(non_iid, entries):
    print("i.i.d. against non-i.i.d. shards (4 workers):\n")
    print("| entry | i.i.d. | non-i.i.d. | non-i.i.d. − i.i.d., paired | non-i.i.d. costs loss |")
    print("|---|---|---|---|---|")
    for e in entries:
        text, verdict, _ = gap(iid[e], non_iid[e], +1)
        print(f"| {e} | {cell(iid[e].values())} | {cell(non_iid[e].values())} | {text} | {verdict} |")
    both = set.intersection(*(set(x[e]) for x in (iid, non_iid) for e in ("ddp", "diloco-h50"))) \
        if {"ddp", "diloco-h50"} <= set(entries) else set()
    d = [(non_iid["diloco-h50"][k] - iid["diloco-h50"][k]) - (non_iid["ddp"][k] - iid["ddp"][k]) for k in sorted(both)]
    if d:
        m, h = mean_hw(d)
        print(f"\nDiLoCo's cost − DDP's cost, paired: {m:+.3f} [{m - h:+.3f}, {m + h:+.3f}]")
    print()

outer = seed_losses("outer-optimizer")
names = ["nesterov", "sgd-lr1", "sgd-lr0.7", "adam"]
if complete(outer, names):
    print("The outer optimiser (DiLoCo, 4 workers, H = 50):\n")
    print("| outer optimiser | final val loss | − Nesterov, paired | Nesterov is better |")
    print("|---|---|---|---|")
    print(f"| nesterov | {cell(outer['nesterov'].values())} | | |")
    for name in names[1:]:
        text, verdict, _ = gap(outer["nesterov"], outer[name], +1)
        print(f"| {name} | {cell(outer[name].values())} | {text} | {verdict} |")

kh = seed_losses("k-and-h-sweep/count-4")
names = ["ddp", "diloco-h10", "diloco-h50", "diloco-h100", "diloco-h500"]
if complete(kh, names):
    print("\nDiLoCo against DDP at equal compute, 4 workers (k-and-h, count 4):\n")
    print("| entry | final val loss | − DDP, paired | DiLoCo is no worse than DDP |")
    print("|---|---|---|---|")
    print(f"| ddp | {cell(kh['ddp'].values())} | | |")
    for name in names[1:]:
        text, verdict, _ = gap(kh["ddp"], kh[name], +1)
        # The claim "no worse" fails when the gap is above zero, holds when below.
        verdict = {"holds": "fails", "fails": "holds"}.get(verdict, verdict)
        print(f"| {name} | {cell(kh[name].values())} | {text} | {verdict} |")
    print("\n| H step | later − earlier, paired | the larger H is worse |")
    print("|---|---|---|")
    for a, b in (("diloco-h10", "diloco-h50"), ("diloco-h50", "diloco-h100"), ("diloco-h100", "diloco-h500")):
        text, verdict, _ = gap(kh[a], kh[b], +1)
        print(f"| {a[7:]} → {b[7:]} | {text} | {verdict} |")
