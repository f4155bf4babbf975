#!/usr/bin/env python3
"""The tables of docs/results/algorithms.md's "Across datacenters and the internet", from records.

  datacenters_table.py collect RECORD_FOLDER TUNE_FOLDER RUN_FOLDER [RUN_FOLDER ...]
  datacenters_table.py print RECORD_FOLDER [A:B ...]

`collect` keeps what the tables need and nothing per step:
- tuning.json: every tuning point's final validation loss, per entry, from a `narrows tune` folder's
  tuning/<entry>/<point>/summary.json (the points that finished);
- seeds.json: every final seed's record of every entry (its summary.json line: losses, times, bytes,
  the time to that seed's target), from `narrows run` folders over disjoint seeds (a folder of
  several seeds holds them in seed-<k>/; one of a single seed, at its top);
- wan.json, where the scenario has islands: each seed's bytes up every island's WAN link (from the
  entries' links.json);
- scenario.yaml: the resolved scenario of the first folder (its seed aside, the others' are equal).

`print` prints, per entry: the learning rate its tuning chose (the point of lowest final loss), the
final validation loss and the time to the target loss (mean and 95% t-interval half-width over the
seeds), the bytes each worker sent (and with islands the bytes that crossed between islands, per
island), and the paired comparisons against the first entry by docs/explanation/methods.md's rule:
the loss gap (verdicts on "lower loss", and on "costs little" and "matches" at the default margin,
0.02 nats; a gap under twice the evaluation's standard error is not resolved) and the speed-up at
the target (verdict on "faster"). Each A:B adds the same paired comparison of entry A against B.
"""
import glob
import json
import math
import os
import re
import shutil
import sys

# t(0.975, df) for df = 1..30 (two-sided 95%).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042]
MARGIN = 0.02  # methods.md's default margin for "costs little" and "matches", nats


def interval(values):
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, T975[n - 2] * sd / math.sqrt(n)


def verdict(lo, hi, n, direction):
    """A direction: holds when the interval excludes zero on the claimed side (-1: below)."""
    if n < 2 or math.isnan(lo) or math.isnan(hi):
        return "inconclusive"
    if direction < 0:
        return "holds" if hi < 0 else "fails" if lo > 0 else "inconclusive"
    return "holds" if lo > 0 else "fails" if hi < 0 else "inconclusive"


def costs_little(lo, hi, n):
    if n < 2:
        return "inconclusive"
    return "holds" if hi < MARGIN else "fails" if lo > MARGIN else "inconclusive"


def matches(lo, hi, n):
    if n < 2:
        return "inconclusive"
    return "holds" if -MARGIN < lo and hi < MARGIN else "fails" if lo > MARGIN or hi < -MARGIN else "inconclusive"


def seed_of(folder):
    with open(os.path.join(folder, "scenario.yaml")) as f:
        return int(re.search(r"^seed: (\d+)$", f.read(), re.M).group(1))


def seed_folders(run):
    """(seed, folder holding that seed's summary.json and entry folders) of a run folder."""
    nested = sorted(glob.glob(os.path.join(run, "seed-*")))
    if nested:
        return [(int(os.path.basename(d)[5:]), d) for d in nested]
    return [(seed_of(run), run)]


def collect(out, tune, runs):
    os.makedirs(out, exist_ok=True)
    tuning = {}
    for path in sorted(glob.glob(os.path.join(tune, "tuning", "*", "*", "summary.json"))):
        entry, point = path.split(os.sep)[-3:-1]
        with open(path) as f:
            r = json.load(f)["results"][0]
        tuning.setdefault(entry, {})[point] = r.get("final_val_loss")
    seeds, wan = {}, {}
    for run in runs:
        for seed, folder in seed_folders(run):
            with open(os.path.join(folder, "summary.json")) as f:
                summary = json.load(f)
            for r in summary["results"]:
                record = {k: v for k, v in r.items() if k not in ("network", "host_step_s")}
                record["seed"] = seed
                record["target_loss"] = summary.get("target_loss")
                seeds.setdefault(r["name"], []).append(record)
                links = os.path.join(folder, r["name"], "links.json")
                if os.path.exists(links):
                    with open(links) as f:
                        up = [l["bytes"] for l in json.load(f)["links"] if l["link"].startswith("wan-up:")]
                    if up:
                        wan.setdefault(r["name"], {})[str(seed)] = {"wan_bytes": sum(up), "islands": len(up)}
    for records in seeds.values():
        records.sort(key=lambda r: r["seed"])
    shutil.copy(os.path.join(runs[0], "scenario.yaml"), os.path.join(out, "scenario.yaml"))
    for name, data in (("tuning.json", tuning), ("seeds.json", seeds), ("wan.json", wan)):
        if data:
            with open(os.path.join(out, name), "w") as f:
                json.dump(data, f, indent=1, sort_keys=name != "seeds.json")
                f.write("\n")
    print("%s: %d entries, seeds %s%s" % (out, len(seeds), sorted({r["seed"] for v in seeds.values() for r in v}),
                                          ", WAN bytes" if wan else ""))


def values(records, key):
    return [r.get(key) for r in records]


def paired(a, b, key, ratio):
    x, y = values(a, key), values(b, key)
    if any(v is None for v in x + y):
        return None
    if ratio:  # b / a on logs: "x times faster"
        mean, hw = interval([math.log(q / p) for p, q in zip(x, y)])
        return math.exp(mean), math.exp(mean - hw), math.exp(mean + hw), verdict(mean - hw, mean + hw, len(x), +1)
    mean, hw = interval([p - q for p, q in zip(x, y)])
    return mean, mean - hw, mean + hw, len(x)


def comparison(a, b):
    text = []
    gap = paired(a, b, "final_val_loss", False)
    if gap:
        mean, lo, hi, n = gap
        se = max(interval(values(a, "final_val_loss_se"))[0], interval(values(b, "final_val_loss_se"))[0])
        resolved = abs(mean) >= 2 * se
        lower = verdict(lo, hi, n, -1) if resolved else "inconclusive, below the evaluation's resolution"
        text.append("loss %+.4f [%+.4f, %+.4f] (lower: %s; costs little: %s; matches: %s)"
                    % (mean, lo, hi, lower, costs_little(lo, hi, n), matches(lo, hi, n)))
    speed = paired(a, b, "time_to_target_s", True)
    bounds = [r["seed"] for r in a + b if r.get("target_at_first_evaluation")]
    if bounds:  # a time to target that is only its first evaluation's: no equal-loss ratio
        text.append("to target: not resolved (below the target at the first evaluation on seeds %s: the times "
                    "are bounds)" % ",".join(map(str, sorted(set(bounds)))))
    else:
        text.append("to target %.2fx [%.2f, %.2f] (faster: %s)" % speed if speed else "to target: not every seed")
    return "; ".join(text)


def mb(v):
    return "%.1f MB" % (v / 1e6) if v < 1e9 else "%.2f GB" % (v / 1e9)


def pm(vals, fmt):
    if any(v is None for v in vals):
        return "never"
    mean, hw = interval(vals)
    return (fmt % mean) + ("" if math.isnan(hw) else " ± " + (fmt % hw))


def print_tables(folder, versus):
    def load(name):
        path = os.path.join(folder, name)
        return json.load(open(path)) if os.path.exists(path) else {}
    seeds, tuning, wan = load("seeds.json"), load("tuning.json"), load("wan.json")
    names = list(seeds)
    base = names[0]
    seed_list = [r["seed"] for r in seeds[base]]
    print("seeds %s; mean ± 95%% t-interval half-width; margin of 'costs little' and 'matches' %.2f nats"
          % (",".join(map(str, seed_list)), MARGIN))
    print()
    head = ("| entry | train.lr (tuning: final loss per point, seed 1000) | final val loss | time (s) "
            "| time to target (s; * a bound) | sent/worker |")
    rule = "|---|---|---|---|---|---|"
    if wan:
        head += " across islands, per island |"
        rule += "---|"
    print(head)
    print(rule)
    for name in names:
        records = seeds[name]
        points = tuning.get(name, {})
        lr = "shared 3e-3 (not tuned)"
        if points:
            best = min(points, key=lambda p: points[p] if points[p] is not None else float("inf"))
            grid = ", ".join("%s %.3f" % (p.split("-seed")[0][3:], points[p]) for p in
                             sorted(points, key=lambda p: float(p.split("-seed")[0][3:])))
            lr = "**%s** (%s)" % (best.split("-seed")[0][3:], grid)
        row = "| %s | %s | %s | %s | %s | %s |" % (
            name, lr, pm(values(records, "final_val_loss"), "%.4f"), pm(values(records, "time_s"), "%.1f"),
            pm(values(records, "time_to_target_s"), "%.1f") +
            ("*" if any(r.get("target_at_first_evaluation") for r in records) else ""),
            mb(interval(values(records, "bytes_sent_per_worker"))[0]))
        if wan:
            w = wan.get(name, {})
            row += " %s |" % (mb(sum(v["wan_bytes"] / v["islands"] for v in w.values()) / len(w)) if w else "-")
        print(row)
    print()
    print("target loss per seed (the worst final loss of the seed's entries): %s"
          % ", ".join("%.4f" % r["target_loss"] for r in seeds[base]))
    print("paired against %s, seed by seed:" % base)
    for name in names[1:]:
        print("  %s: %s" % (name, comparison(seeds[name], seeds[base])))
    for pair in versus:
        a, b = pair.split(":")
        print("  %s against %s: %s" % (a, b, comparison(seeds[a], seeds[b])))


def main(argv):
    if len(argv) >= 5 and argv[1] == "collect":
        collect(argv[2], argv[3], argv[4:])
    elif len(argv) >= 3 and argv[1] == "print":
        print_tables(argv[2], argv[3:])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
