#!/usr/bin/env python3
"""One table over seeds from run folders of the same scenario run one seed at a time (or a few
entries at a time): each FOLDER is a run folder holding summary.json and scenario.yaml, or one with
seed-K run folders inside. Per entry the final validation loss as mean ± 95% t-interval half-width
over the seeds that ran it, its time and bytes; then for each `A:B` A's final loss minus B's,
paired over the seeds both ran, with the verdict on "A ends lower than B" (docs/explanation/methods.md). Every
figure is narrows' own (each seed's summary.json); only the means, intervals and differences are
computed here.
Usage: combine.py FOLDER... [-- A:B ...]"""
import importlib.util
import json
import pathlib
import re
import sys

_spec = importlib.util.spec_from_file_location("algorithms_table", pathlib.Path(__file__).resolve().parent / "table.py")
_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_table)


def seed_runs(folder):
    """(seed, summary) for the run folder and the seed-K folders inside it."""
    folder = pathlib.Path(folder)
    seeded = sorted(folder.glob("seed-*/summary.json"))
    if seeded:
        for summary in seeded:
            yield int(summary.parent.name[5:]), json.loads(summary.read_text())
        return
    scenario = (folder / "scenario.yaml").read_text()
    m = re.search(r"^seed: *(\d+)", scenario, re.M)
    yield (int(m.group(1)) if m else 0), json.loads((folder / "summary.json").read_text())


def main(folders, pairs):
    losses, rows = {}, {}  # entry -> {seed: loss}; entry -> a result (times and bytes)
    for folder in folders:
        for seed, summary in seed_runs(folder):
            for r in summary["results"]:
                if seed in losses.setdefault(r["name"], {}):
                    sys.exit(f"combine.py: seed {seed} of {r['name']} given twice")
                losses[r["name"]][seed] = r["final_val_loss"]
                rows.setdefault(r["name"], []).append(r)
    print("| entry | seeds | final val loss | time (s) | sent/worker | updates | compute |")
    print("|---|---|---|---|---|---|---|")
    for name, by_seed in losses.items():
        m, h = _table._scaling_table.mean_hw(list(by_seed.values()))
        r = rows[name][0]
        times = sorted({round(x["time_s"], 1) for x in rows[name]})
        loss = f"{m:.4f}" + ("" if h != h else f" ± {h:.4f}")
        print(f"| {name} | {', '.join(map(str, sorted(by_seed)))} | {loss} | {' / '.join(map(str, times))} | "
              f"{r['bytes_sent_per_worker'] / 1e6:.1f} MB | {r.get('outer_syncs', 0):.0f} | "
              f"{100 * r['compute_utilization']:.0f}% |")
    print()
    _table.print_pairs(losses, pairs)


if __name__ == "__main__":
    args = sys.argv[1:]
    cut = args.index("--") if "--" in args else len(args)
    if cut == 0:
        sys.exit(__doc__)
    main(args[:cut], args[cut + 1:])
