#!/usr/bin/env python3
"""Prints the CompleteP table of docs/results.md from the sweep completep.sh runs.

Usage: python3 docs/results/completep/table.py [SWEEP]   (default runs/completep/completep-sweep)
For each parameterisation and depth: the final validation loss at every peak learning rate, the
best grid value, and the optimum of a parabola through the best value and its neighbours in log2(lr).
"""
import csv
import math
import os
import sys
from collections import defaultdict

sweep = sys.argv[1] if len(sys.argv) > 1 else "runs/completep/completep-sweep"
loss = defaultdict(dict)
with open(os.path.join(sweep, "results.csv")) as f:
    for r in csv.DictReader(f):
        loss[(r["model.parameterization"], int(r["model.n_layers"]))][float(r["train.lr"])] = float(r["final_val_loss"])
lrs = sorted({lr for v in loss.values() for lr in v})
print("| parameterisation | depth | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | best | parabola optimum |")
print("|---|---|" + "---|" * len(lrs) + "---|---|")
for (param, depth), v in sorted(loss.items()):
    xs = sorted(v)
    best = min(xs, key=lambda x: v[x])
    i = min(max(xs.index(best), 1), len(xs) - 2)
    x = [math.log2(xs[j]) for j in (i - 1, i, i + 1)]
    y = [v[xs[j]] for j in (i - 1, i, i + 1)]
    curvature = y[0] - 2 * y[1] + y[2]
    vertex = 2 ** (x[1] - (y[2] - y[0]) / (2 * curvature)) if curvature > 0 else float("nan")
    cells = [f"**{v[lr]:.3f}**" if lr == best else f"{v[lr]:.3f}" for lr in lrs]
    print(f"| {param} | {depth} | " + " | ".join(cells) + f" | {best:g} | {vertex:.4f} |")
