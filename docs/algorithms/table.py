#!/usr/bin/env python3
"""Markdown tables from a `narrows sweep` (or `narrows run`) folder: per point and entry the final
validation loss, the virtual time to reach the target loss (the worst final loss among the point's
entries, so every entry reaches it), the virtual wall-clock time, bytes sent per worker and the
peak bytes per round. Usage: table.py FOLDER"""
import json
import pathlib
import sys


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


def val_curve(entry_dir):
    out = []
    for line in (entry_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        if "val_loss" in m:
            out.append((m.get("virtual_time_s", m.get("wall_time_s")), m["val_loss"]))
    return out


def main(folder):
    for label, run in runs(folder):
        results = json.loads((run / "summary.json").read_text())["results"]
        target = max(r["final_val_loss"] for r in results)
        print(f"\n**{label}** (target loss {target:.4f}: the worst final loss)\n")
        print("| entry | final val loss | time to target (s) | time (s) | sent/worker | peak/round | compute |")
        print("|---|---|---|---|---|---|---|")
        for r in results:
            reach = next((t for t, v in val_curve(run / r["name"]) if v <= target + 1e-12), None)
            print(f"| {r['name']} | {r['final_val_loss']:.4f} | {reach:.1f} | {r['time_s']:.1f} | "
                  f"{human(r['bytes_sent_per_worker'])} | {human(r.get('peak_bytes_per_round', 0))} | "
                  f"{100 * r['compute_utilization']:.0f}% |")


if __name__ == "__main__":
    main(sys.argv[1])
