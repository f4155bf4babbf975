#!/usr/bin/env python3
"""Markdown tables from a `narrows sweep` (or `narrows run`) folder run over seeds: per point and
entry the final validation loss and the interpolated time to the target loss (each seed's worst
final loss among the point's entries), as mean ± 95% t-interval half-width over the seeds; bytes
sent and peak bytes per round per worker; and against the first entry the paired loss gap and
speed-up at equal loss with their 95% intervals and verdicts (holds / fails / inconclusive, the
rule in docs/explanation/methods.md). All figures are narrows' own (summary.json); nothing is recomputed,
except for pairs named after the folder: `A:B` prints A's final loss minus B's, paired by seed, with
its 95% t-interval and the verdict on "A ends lower than B".
Usage: table.py FOLDER [A:B ...]"""
import importlib.util
import json
import pathlib
import sys

_spec = importlib.util.spec_from_file_location(
    "scaling_table", pathlib.Path(__file__).resolve().parents[1] / "scaling" / "table.py")
_scaling_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_scaling_table)


def human(b):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b:.0f} B"


def runs(folder):
    folder = pathlib.Path(folder)
    if (folder / "summary.json").exists():
        yield folder.name, folder
        return
    sweep = json.loads((folder / "sweep.json").read_text())
    for p in sweep["points"]:
        run = folder / p["name"]
        if (run / "summary.json").exists():  # a point not run yet has none
            yield ", ".join(p["values"]), run


def pm(r, key, fmt):
    mean, hw = r.get(key), r.get(key + "_ci95")
    if mean is None:
        return "never"
    return fmt % mean + ("" if hw is None else " ± " + fmt % hw)


def versus(r):
    v = r.get("versus_baseline") or r.get("versus_first")
    if not v:
        return "baseline", "baseline"
    gap = v.get("loss_gap")
    loss = "-" if not gap else f"{gap['mean']:+.4f} [{gap['lo']:+.4f}, {gap['hi']:+.4f}] {gap['lower_loss']}"
    s = v.get("speedup_at_target")
    speed = "-" if not s else f"{s['ratio']:.2f}x [{s['lo']:.2f}, {s['hi']:.2f}] {s['faster']}"
    return loss, speed


def print_pairs(losses, names):
    """Each `A:B` of names: A's final loss minus B's, paired over the seeds both have, with the
    verdict on "A ends lower than B". losses: {entry: {seed: final loss}}."""
    for pair in names:
        a, _, b = pair.partition(":")
        if a not in losses or b not in losses:
            sys.exit(f"{pair}: no entry named {a if a not in losses else b}")
        common = sorted(set(losses[a]) & set(losses[b]))
        m, h = _scaling_table.mean_hw([losses[a][k] - losses[b][k] for k in common])
        v = _scaling_table.verdict(m - h, m + h, len(common), -1)
        print(f"- {a} − {b}, paired over seeds {', '.join(map(str, common))}: {m:+.4f} [{m - h:+.4f}, {m + h:+.4f}]; "
              f"{a} lower: {v}")


def pairs(summary, names):
    """print_pairs over a summary's entries and seeds."""
    print_pairs({r["name"]: {p.get("seed", 0): p["final_val_loss"] for p in r.get("per_seed", [r])}
                 for r in summary["results"]}, names)


def main(folder, names=()):
    for label, run in runs(folder):
        summary = json.loads((run / "summary.json").read_text())
        seeds = summary.get("seeds", [0])
        print(f"\n**{label}** (seeds {', '.join(map(str, seeds))}; target: each seed's worst final loss; "
              f"time to target interpolated between evaluations every {summary.get('eval_every')} steps)\n")
        print("| entry | collective | final val loss | time to target (s) | sent/worker | peak/round | "
              "loss gap vs first [95%] lower | speed-up at equal loss [95%] faster |")
        print("|---|---|---|---|---|---|---|---|")
        for r in summary["results"]:
            loss, speed = versus(r)
            one = r.get("per_seed", [r])[0]
            print(f"| {r['name']} | {r.get('collective', '-')} | {pm(r, 'final_val_loss', '%.4f')} | "
                  f"{pm(r, 'time_to_target_s', '%.1f')} | {human(r['bytes_sent_per_worker'])} | "
                  f"{human(one.get('peak_bytes_per_round', 0))} | {loss} | {speed} |")
        if names:
            print()
            pairs(summary, names)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
