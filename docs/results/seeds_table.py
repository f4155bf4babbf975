#!/usr/bin/env python3
"""Tables of docs/results/papers.md Part 2's claims over seeds, from the runs of seeds.sh.

Usage: python3 docs/results/seeds_table.py [FOLDER]   (default runs/results-seeds)

Each entry's final validation loss is the mean ± 95% t half-width over the seeds; each gap is
paired by seed (the same initialisation and batches), with its 95% t-interval and the verdict of
docs/explanation/methods.md for the claim the row names: holds when the interval excludes zero on the claimed
side, fails when on the other, else inconclusive. A part whose runs are not all finished is left out.
"""
import importlib.util
import json
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
    return _scaling_table.fmt(list(values), 3)


def gap(a, b, sign):
    """b - a paired by seed, its interval, and the verdict on the claim that it has sign `sign`."""
    seeds = sorted(set(a) & set(b))
    m, h = mean_hw([b[k] - a[k] for k in seeds])
    return f"{m:+.3f} [{m - h:+.3f}, {m + h:+.3f}]", _scaling_table.verdict(m - h, m + h, len(seeds), sign), len(seeds)


def complete(losses, entries, seeds=3):
    return all(len(losses.get(e, {})) >= seeds for e in entries)


def against_baseline(heading, columns, losses, rows, sign):
    """A table of entries against the first of `rows` ((entry, label) pairs), paired by seed: each
    row's loss, its gap to the first and the verdict on the claim that the gap has sign `sign`."""
    print(heading)
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|")
    (first, label), rest = rows[0], rows[1:]
    print(f"| {label} | {cell(losses[first].values())} | | |")
    for name, label in rest:
        text, verdict, _ = gap(losses[first], losses[name], sign)
        print(f"| {label} | {cell(losses[name].values())} | {text} | {verdict} |")


dropped = seed_losses("dropped")
if complete(dropped, ["drop-0", "drop-30", "drop-50"]):
    against_baseline("Dropped outer gradients (DiLoCo, 4 workers, H = 50):\n",
                     ["p", "final val loss", "− p = 0, paired", "the drops cost loss"], dropped,
                     [("drop-0", "0"), ("drop-30", "0.3"), ("drop-50", "0.5")], +1)
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
    against_baseline("The outer optimiser (DiLoCo, 4 workers, H = 50):\n",
                     ["outer optimiser", "final val loss", "− Nesterov, paired", "Nesterov is better"], outer,
                     [(n, n) for n in names], +1)

for count in (4, 8):
    kh = seed_losses(f"k-and-h-sweep/count-{count}")
    names = ["ddp", "diloco-h10", "diloco-h50", "diloco-h100", "diloco-h500"]
    if not complete(kh, names):
        continue
    against_baseline(f"\nDiLoCo against DDP at equal compute, {count} workers (k-and-h, count {count}):\n",
                     ["entry", "final val loss", "− DDP, paired", "DiLoCo is no worse than DDP"], kh,
                     [(n, n) for n in names], -1)
    print("\n| H step | later − earlier, paired | the larger H is worse |")
    print("|---|---|---|")
    for a, b in (("diloco-h10", "diloco-h50"), ("diloco-h50", "diloco-h100"), ("diloco-h100", "diloco-h500")):
        text, verdict, _ = gap(kh[a], kh[b], +1)
        print(f"| {a[7:]} → {b[7:]} | {text} | {verdict} |")

# Number of workers: DiLoCo-H50 against DDP at each M (1 and 2 here; 4 and 8 are k-and-h's).
rows = []
for count in (1, 2, 16):
    w = seed_losses(f"workers-sweep/count-{count}")
    if complete(w, ["ddp", "diloco-h50"]):
        text, verdict, n = gap(w["ddp"], w["diloco-h50"], -1)
        rows.append(f"| {count} | {cell(w['ddp'].values())} | {cell(w['diloco-h50'].values())} | {text} | {verdict} |")
if rows:
    print("\nNumber of workers (DiLoCo H = 50 against DDP, each worker 500 steps):\n")
    print("| M | DDP | DiLoCo H = 50 | DiLoCo − DDP, paired | DiLoCo is no worse than DDP |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))

# A growing and a shrinking pool: the same 3,000 worker-steps spent in opposite orders.
grow, shrink = seed_losses("growing"), seed_losses("shrinking")
if complete(grow, ["ddp", "diloco-h50"]) and complete(shrink, ["ddp", "diloco-h50"]):
    print("\nA growing (4 → 8) and a shrinking (8 → 4) pool:\n")
    print("| entry | growing | shrinking | shrinking − growing, paired | the order matters |")
    print("|---|---|---|---|---|")
    for e in ("ddp", "diloco-h50"):
        text, verdict, _ = gap(grow[e], shrink[e], +1)
        # An order effect of either sign: "holds" where the interval excludes zero on either side.
        verdict = "holds" if verdict in ("holds", "fails") else verdict
        print(f"| {e} | {cell(grow[e].values())} | {cell(shrink[e].values())} | {text} | {verdict} |")

# H and the outer learning rate (4 workers): outer-lr.yaml's entries beside k-and-h's at 0.7.
olr, kh4 = seed_losses("outer-lr"), seed_losses("k-and-h-sweep/count-4")
cells = {(10, 0.2): (olr, "h10-lr0.2"), (10, 0.35): (olr, "h10-lr0.35"), (10, 0.7): (kh4, "diloco-h10"),
         (50, 0.35): (olr, "h50-lr0.35"), (50, 0.7): (kh4, "diloco-h50"),
         (100, 0.35): (olr, "h100-lr0.35"), (100, 0.7): (kh4, "diloco-h100"), (500, 0.7): (kh4, "diloco-h500")}
# H = 10 at lr 0.2 and H = 500 are shown where they were run; the other six cells are needed.
needed = [(10, 0.35), (10, 0.7), (50, 0.35), (50, 0.7), (100, 0.35), (100, 0.7)]
if all(complete(*cells[key][:1], [cells[key][1]]) for key in needed):
    losses = {key: src[name] for key, (src, name) in cells.items() if complete(src, [name])}
    print("\nH and the outer learning rate (DiLoCo, 4 workers):\n")
    print("| H | outer lr 0.2 | outer lr 0.35 | outer lr 0.7 |")
    print("|---|---|---|---|")
    hs = [h for h in (10, 50, 100, 500) if any(hh == h for hh, _ in losses)]
    for h in hs:
        print(f"| {h} | " + " | ".join(cell(losses[(h, lr)].values()) if (h, lr) in losses else "" for lr in (0.2, 0.35, 0.7)) + " |")
    print("\n| comparison | paired | the first is better |")
    print("|---|---|---|")
    for a, b in (((10, 0.35), (10, 0.7)), ((10, 0.35), (10, 0.2)), ((50, 0.7), (50, 0.35)), ((100, 0.7), (100, 0.35))):
        if b not in losses:
            continue
        text, verdict, _ = gap(losses[b], losses[a], -1)
        print(f"| H = {a[0]}: lr {a[1]} − lr {b[1]} | {text} | {verdict} |")
    # With each H's best learning rate (by the mean), each step up in H, paired.
    best = {h: min((lr for hh, lr in losses if hh == h), key=lambda lr: sum(losses[(h, lr)].values())) for h in hs}
    print("\n| H step, each at its best outer lr | later − earlier, paired | the larger H is worse |")
    print("|---|---|---|")
    for a, b in zip(hs, hs[1:]):
        text, verdict, _ = gap(losses[(a, best[a])], losses[(b, best[b])], +1)
        print(f"| {a} (lr {best[a]}) → {b} (lr {best[b]}) | {text} | {verdict} |")
