#!/usr/bin/env python3
"""Prints the CompleteP tables of docs/results/papers.md from the sweeps completep.sh runs.

Usage: python3 docs/results/completep/table.py [SWEEP ...]   (default runs/completep/completep-sweep)

Every point of a sweep ran over seeds (its summary.json has each seed's final validation loss).
Three tables:
1. the final validation loss per parameterisation, depth and peak learning rate: mean ± 95%
   t half-width over the seeds, the best grid value (bold) and the optimum of a parabola through
   the seeds' mean losses at the best value and its neighbours in log2(lr);
2. per depth, the optimum's log2 over the seeds (each seed's own parabola), and its shift from
   depth 2 paired by seed;
3. the claims: the slope of log2(optimum) against log2(depth) (a least-squares line per seed, then
   the mean and t-interval of the seeds' slopes) for each parameterisation; the paired difference
   of the slopes' sizes; and the loss at the deepest depth's own best learning rate, paired by seed.
A CompleteP point whose scenario.yaml has model.depth_alpha other than 1 (alpha.sh's, 0.5) is its own
parameterisation, "completep α=0.5", with the same claims against CompleteP (α = 1).
Verdicts by docs/explanation/methods.md: holds when the 95% interval excludes zero on the claimed side, fails
when on the other, else inconclusive. "Stays put" is a claim of no effect, so it is read against a
band: it holds when the whole interval of the slope lies within ±0.25 (less than a factor 1.68 over
depths 2 to 16), fails when the whole interval lies outside it, else is inconclusive.
"""
import importlib.util
import json
import math
import os
import sys
from collections import defaultdict

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("scaling_table", os.path.join(_here, "..", "..", "scaling", "table.py"))
_scaling_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_scaling_table)
mean_hw, fmt, slope = _scaling_table.mean_hw, _scaling_table.fmt, _scaling_table.slope

sweeps = sys.argv[1:] or ["runs/completep/completep-sweep"]

# (parameterisation, depth) -> {lr: {seed: final loss}}
loss = defaultdict(lambda: defaultdict(dict))
for sweep in sweeps:
    for point in sorted(os.listdir(sweep)):
        summary = os.path.join(sweep, point, "summary.json")
        if not os.path.exists(summary):
            continue  # not finished (the sweep resumes)
        # The point's folder names its grid values: parameterization-X_n_layers-D_lr-L.
        fields = dict(part.split("-", 1) for part in point.replace("n_layers", "depth").split("_"))
        param = fields["parameterization"]
        if param == "completep":
            # CompleteP's depth exponent is the point's model.depth_alpha (alpha.sh sets 0.5).
            with open(os.path.join(sweep, point, "scenario.yaml")) as f:
                alpha = next((float(line.split(":")[1]) for line in f if line.strip().startswith("depth_alpha:")), 1.0)
            if alpha != 1.0:
                param = f"completep α={alpha:g}"
        key = (param, int(fields["depth"]))
        with open(summary) as f:
            r = json.load(f)["results"][0]
        per_seed = r.get("per_seed") or [r]
        for k, s in enumerate(per_seed):
            loss[key][float(fields["lr"])][k] = s["final_val_loss"]


def vertex(xs, ys):
    """log2 of the optimum of the parabola through the lowest of ys and its neighbours (xs in
    log2(lr)); at the grid's edge, or where the three points do not curve upwards, the best x."""
    i = min(range(len(ys)), key=lambda j: ys[j])
    if i == 0 or i == len(ys) - 1:
        return xs[i]
    x, y = xs[i - 1:i + 2], ys[i - 1:i + 2]
    curvature = y[0] - 2 * y[1] + y[2]
    if curvature <= 0:
        return xs[i]
    step = x[1] - x[0]
    return x[1] - step * (y[2] - y[0]) / (2 * curvature)


def interval(values, digits=3):
    m, h = mean_hw(values)
    return m, h, f"{m:+.{digits}f} [{m - h:+.{digits}f}, {m + h:+.{digits}f}]"


def verdict(m, h, sign):
    """The claim that a quantity measured on every seed has sign `sign` (+1: above zero, -1: below)."""
    return _scaling_table.verdict(m - h, m + h, len(seeds), sign)


BAND = 0.25  # |slope| below this: the optimum moves less than 2^(0.25 * 3) = 1.68x from depth 2 to 16


def band_verdict(m, h):
    """The claim of no effect, |quantity| < BAND: holds when the interval lies inside the band,
    fails when it lies wholly outside, else inconclusive."""
    if math.isnan(h):
        return "inconclusive"
    if -BAND < m - h and m + h < BAND:
        return "holds"
    if m - h > BAND or m + h < -BAND:
        return "fails"
    return "inconclusive"


lrs = sorted({lr for v in loss.values() for lr in v})
seeds = sorted({k for v in loss.values() for per in v.values() for k in per})
# The learning rates every point has; a point may have more (a grid extended above its top rate
# where the optimum sat at the edge). A point is complete when it has these and every seed at each
# of its own rates; its optima are read from all of its rates.
common = set.intersection(*(set(v) for v in loss.values())) if loss else set()
complete = {key: v for key, v in loss.items() if common <= set(v) and all(set(per) == set(seeds) for per in v.values())}

print(f"Seeds {len(seeds)}; learning rates {', '.join(f'{lr:g}' for lr in lrs)}.\n")
print("| parameterisation | depth | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | best | parabola optimum |")
print("|---|---|" + "---|" * len(lrs) + "---|---|")
optimum = {}  # (param, depth) -> {seed: log2 optimum}
for (param, depth), v in sorted(loss.items()):
    means = {lr: mean_hw(list(per.values())) for lr, per in v.items()}
    texts = {lr: fmt(list(per.values()), 3) for lr, per in v.items()}
    xs = sorted(v)
    best = min(xs, key=lambda x: means[x][0])
    cells = []
    for lr in lrs:
        if lr not in means:
            cells.append("")
            continue
        text = texts[lr]
        cells.append(f"**{text}**" if lr == best else text)
    opt = 2 ** vertex([math.log2(x) for x in xs], [means[x][0] for x in xs])
    print(f"| {param} | {depth} | " + " | ".join(cells) + f" | {best:g} | {opt:.4f} |")
    if (param, depth) in complete:
        optimum[(param, depth)] = {k: vertex([math.log2(x) for x in xs], [v[x][k] for x in xs]) for k in seeds}

params = sorted({p for p, _ in optimum})
depths = sorted({d for _, d in optimum})
if not depths:
    sys.exit(0)
base = depths[0]
print(f"\nEach seed's optimum (its own parabola), log2(lr): mean ± 95% half-width; its shift from depth {base}, paired by seed.\n")
print("| parameterisation | depth | log2 optimum | optimum | shift from depth " + str(base) + " (log2) |")
print("|---|---|---|---|---|")
for param in params:
    for depth in depths:
        o = optimum.get((param, depth))
        if not o:
            continue
        m, h = mean_hw(list(o.values()))
        shift = "" if depth == base else interval([o[k] - optimum[(param, base)][k] for k in seeds], 2)[2]
        print(f"| {param} | {depth} | {fmt(list(o.values()), 2)} | {2 ** m:.4f} | {shift} |")


def label(param):
    return "the standard parameterisation" if param == "standard" else param


slopes = {}
for param in params:
    if all((param, d) in optimum for d in depths) and len(depths) >= 3:  # a line through 3 points at least
        slopes[param] = {k: slope([math.log2(d) for d in depths], [optimum[(param, d)][k] for d in depths])[0]
                         for k in seeds}
print("\n| claim | quantity | value [95% interval] | verdict |")
print("|---|---|---|---|")
if len(depths) < 3:
    print(f"| how the optimum moves with depth | needs three depths or more; complete: {', '.join(map(str, depths))} | | not measured |")
if "standard" in slopes:
    m, h, text = interval(list(slopes["standard"].values()))
    print(f"| the standard parameterisation's optimum falls with depth | slope of log2(optimum) on log2(depth) | {text} | {verdict(m, h, -1)} |")
for param in (p for p in params if p.startswith("completep") and p in slopes):
    m, h, text = interval(list(slopes[param].values()))
    name = "CompleteP's" if param == "completep" else f"{param}'s"
    print(f"| {name} optimum stays put: \\|slope\\| < {BAND} | slope of log2(optimum) on log2(depth) | {text} | "
          f"{band_verdict(m, h)} |")
    if len(depths) > 3:
        # Past the base depth, where the branch multiplier is 1 under every parameterisation.
        rest = {k: slope([math.log2(d) for d in depths[1:]], [optimum[(param, d)][k] for d in depths[1:]])[0]
                for k in seeds}
        m, h, text = interval(list(rest.values()))
        print(f"| ... from depth {depths[1]} on (depths {', '.join(map(str, depths[1:]))}) | the same slope | {text} | "
              f"{band_verdict(m, h)} |")
for other in (p for p in params if p != "completep" and p in slopes and "completep" in slopes):
    m, h, text = interval([abs(slopes["completep"][k]) - abs(slopes[other][k]) for k in seeds])
    print(f"| CompleteP's optimum moves less than {label(other)}'s | \\|completep slope\\| − \\|{other} slope\\|, paired | {text} | {verdict(m, h, -1)} |")
deep = depths[-1]


def best_loss(param):  # each seed's loss at that seed's best grid learning rate
    v = complete[(param, deep)]
    return {k: min(per[k] for per in v.values()) for k in seeds}


for other in (p for p in params if p != "completep"):
    if not all((p, deep) in complete for p in (other, "completep")):
        continue
    o, c = best_loss(other), best_loss("completep")
    m, h, text = interval([c[k] - o[k] for k in seeds])
    print(f"| CompleteP trains depth {deep} at least as well as {label(other)} | completep − {other} best loss at depth {deep}, paired | {text} | {verdict(m, h, -1)} |")
