#!/usr/bin/env python3
"""Markdown tables of the scaling study (docs/scaling/study.sh) from its tune folders: per model
size N and workers M each entry's final validation loss (mean ± 95% t-interval half-width over the
final seeds) with its chosen inner and outer learning rates; the best H per (N, M); and each of the
paper's findings as a row, holds / fails / inconclusive (the rule of docs/explanation/methods.md: a 95%
interval that excludes zero on the claimed side holds, on the other side fails, else
inconclusive). All losses are narrows' own (summary.json); the trends are least-squares slopes
over the seeds' values with their t-intervals.
Usage: table.py STUDY_FOLDER [BATCH_FOLDER]"""
import json
import math
import pathlib
import re
import statistics
import sys

# Student's t quantile (0.975) by degrees of freedom; beyond 30, the normal's.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 25: 2.060, 30: 2.042}


def t975(dof):
    if dof <= 0:
        return math.nan
    if dof in T975:
        return T975[dof]
    return next((T975[k] for k in sorted(T975) if k >= dof), 1.96)


def mean_hw(values):
    if len(values) < 2:
        return (values[0] if values else math.nan), math.nan
    return statistics.mean(values), t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def points(folder):
    """(N label, N, M) -> {entry: {"losses": [...], "chosen": {...}}}"""
    out = {}
    for tune in sorted(pathlib.Path(folder).glob("n*-m*-tune")):
        m = re.fullmatch(r"n(\w+)-m(\d+)-tune", tune.name)
        summary = tune / "summary.json"
        if not m or not summary.exists():
            continue
        s = json.loads(summary.read_text())
        scenario = (tune / "scenario.yaml").read_text()
        d = int(re.search(r"d_model: (\d+)", scenario).group(1))
        layers = int(re.search(r"n_layers: (\d+)", scenario).group(1))
        n = 256 * d + 128 * d + layers * (12 * d * d + 13 * d) + 2 * d  # trainer/gpt.cc's layout, seq_len 128
        chosen = {e["name"]: e["chosen"] for e in s.get("tuning", {}).get("entries", [])}
        entries = {}
        for r in s["results"]:
            losses = [x["final_val_loss"] for x in r.get("per_seed", [])] or [r["final_val_loss"]]
            entries[r["name"]] = {"losses": losses, "chosen": chosen.get(r["name"], {})}
        out[(m.group(1), n, int(m.group(2)))] = entries
    return out


def fmt(values, digits=4):
    mean, hw = mean_hw(values)
    return f"{mean:.{digits}f}" + ("" if math.isnan(hw) else f" ± {hw:.{digits}f}")


def verdict(lo, hi, n, sign):
    if n < 2 or math.isnan(lo) or math.isnan(hi):
        return "inconclusive"
    if (sign > 0 and lo > 0) or (sign < 0 and hi < 0):
        return "holds"
    if (sign > 0 and hi < 0) or (sign < 0 and lo > 0):
        return "fails"
    return "inconclusive"


def slope(xs, ys):
    """Least-squares slope of ys on xs with its 95% t-interval."""
    n = len(xs)
    if n < 3 or len(set(xs)) < 2:
        return math.nan, math.nan, math.nan
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    rss = sum((y - my - b * (x - mx)) ** 2 for x, y in zip(xs, ys))
    hw = t975(n - 2) * math.sqrt(rss / (n - 2) / sxx)
    return b, b - hw, b + hw


def best_diloco(entries):
    dil = {k: v for k, v in entries.items() if k.startswith("diloco")}
    return min(dil, key=lambda k: statistics.mean(dil[k]["losses"])) if dil else None


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    pts = points(sys.argv[1])
    if not pts:
        raise SystemExit(f"table.py: no finished tune folder in {sys.argv[1]}")
    names = sorted({e for v in pts.values() for e in v})
    print("| N | M | " + " | ".join(names) + " | chosen (inner lr; outer lr) |")
    print("|---|---|" + "---|" * len(names) + "---|")
    for (label, n, m), entries in sorted(pts.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        cells = [fmt(entries[e]["losses"]) if e in entries else "-" for e in names]
        chosen = "; ".join(f"{e}: " + ", ".join(f"{k.split('.')[-1]} {v}" for k, v in sorted(entries[e]["chosen"].items()))
                           for e in names if e in entries)
        print(f"| {n:,} | {m} | " + " | ".join(cells) + f" | {chosen} |")

    # Best H per (N, M), and the paired H16 - H64 difference (same seeds).
    print("\n| N | M | best H | L(H=16) − L(H=64) [95%] |")
    print("|---|---|---|---|")
    h_trend = {}
    for (label, n, m), e in sorted(pts.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        if "diloco-h16" not in e or "diloco-h64" not in e:
            continue
        diff = [a - b for a, b in zip(e["diloco-h16"]["losses"], e["diloco-h64"]["losses"])]
        mean, hw = mean_hw(diff)
        best = "64" if mean > 0 else "16"
        print(f"| {n:,} | {m} | {best} | {mean:+.4f}" + ("" if math.isnan(hw) else f" [{mean - hw:+.4f}, {mean + hw:+.4f}]") + " |")
        h_trend.setdefault(m, []).extend((math.log(n), d) for d in diff)

    rows = []
    # 1. DiLoCo at M = 1 beats DP: the best DiLoCo's paired gap to DDP at every size.
    for (label, n, m), e in sorted(pts.items(), key=lambda kv: kv[0][1]):
        if m != 1 or "ddp" not in e:
            continue
        b = best_diloco(e)
        if not b:
            continue
        gap = [a - c for a, c in zip(e[b]["losses"], e["ddp"]["losses"])]
        mean, hw = mean_hw(gap)
        rows.append((f"DiLoCo at M = 1 beats DP (N = {n:,}; {b})", f"{mean:+.4f} [{mean - hw:+.4f}, {mean + hw:+.4f}]",
                     verdict(mean - hw, mean + hw, len(gap), -1)))
    # 2. The DiLoCo - DP gap shrinks with N, per M > 1: slope of the seeds' gaps against log N.
    for m in sorted({k[2] for k in pts if k[2] > 1}):
        xs, ys = [], []
        for (label, n, mm), e in pts.items():
            b = best_diloco(e)
            if mm == m and b and "ddp" in e:
                for a, c in zip(e[b]["losses"], e["ddp"]["losses"]):
                    xs.append(math.log(n))
                    ys.append(a - c)
        s, lo, hi = slope(xs, ys)
        rows.append((f"the DiLoCo − DP gap shrinks with N (M = {m}; slope per e-fold of N)",
                     f"{s:+.4f} [{lo:+.4f}, {hi:+.4f}]", verdict(lo, hi, len(xs), -1)))
    # 3. Best H grows with N: L(H=16) − L(H=64) grows with log N (H = 64 gains on H = 16).
    for m, pairs in sorted(h_trend.items()):
        s, lo, hi = slope([p[0] for p in pairs], [p[1] for p in pairs])
        rows.append((f"best H grows with N (M = {m}; slope of L(H=16) − L(H=64) per e-fold of N)",
                     f"{s:+.4f} [{lo:+.4f}, {hi:+.4f}]", verdict(lo, hi, len(pairs), +1)))
    # 4. The outer learning rate is independent of N: the chosen value per (M, H) at every size.
    for m in sorted({k[2] for k in pts}):
        for h in ("diloco-h16", "diloco-h64"):
            chosen = [(n, e[h]["chosen"].get(f"compare.{1 if h.endswith('16') else 2}.outer_lr"))
                      for (label, n, mm), e in sorted(pts.items(), key=lambda kv: kv[0][1]) if mm == m and h in e]
            chosen = [c for c in chosen if c[1] is not None]
            if len(chosen) < 2:
                continue
            same = len({c[1] for c in chosen}) == 1
            rows.append((f"outer lr independent of N (M = {m}, {h}; chosen from 0.4, 0.8)",
                         ", ".join(f"{v} at {n:,}" for n, v in chosen),
                         "holds (on a two-value grid)" if same else "fails (on a two-value grid)"))
    # 5. DiLoCo tolerates larger batches: DDP's loss rises more than DiLoCo's at 4x the global batch.
    if len(sys.argv) == 3:
        big = points(sys.argv[2])
        for (label, n, m), e in sorted(big.items(), key=lambda kv: kv[0][1]):
            small = pts.get((label, n, m))
            if not small or "ddp" not in e or "ddp" not in small:
                continue
            b = best_diloco(e) or ""
            bs = best_diloco(small) or ""
            rise_ddp = statistics.mean(e["ddp"]["losses"]) - statistics.mean(small["ddp"]["losses"])
            rise_dil = statistics.mean(e[b]["losses"]) - statistics.mean(small[bs]["losses"])
            # Independent runs: the variance of a difference of four means adds up (Welch, with the
            # smallest degrees of freedom).
            groups = [e["ddp"]["losses"], small["ddp"]["losses"], e[b]["losses"], small[bs]["losses"]]
            var = sum(statistics.variance(g) / len(g) for g in groups if len(g) > 1)
            dof = min(len(g) for g in groups) - 1
            hw = t975(dof) * math.sqrt(var) if dof > 0 else math.nan
            d = rise_ddp - rise_dil
            rows.append((f"DiLoCo tolerates a 4x batch better than DP (N = {n:,}, M = {m}; DP's rise − DiLoCo's)",
                         f"{d:+.4f} [{d - hw:+.4f}, {d + hw:+.4f}]", verdict(d - hw, d + hw, dof + 1, +1)))
    print("\n| finding | measured [95% interval] | verdict |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
