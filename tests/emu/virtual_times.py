#!/usr/bin/env python3
"""Every scenario of scenarios/ keeps its virtual times: each entry's time at every logged step and at
its end, trained (modelled compute, the nano model) and, where the scenario allows it,
sizes-only, against the times recorded in tests/emu/virtual_times.json.

  virtual_times.py NARROWS check    compare, to 1e-9 relative (exit 1 naming each difference)
  virtual_times.py NARROWS record   write the record from this binary's runs

The emulator's scheduler and the analytic model may change how they find the next event, never
when it happens: this is the check that they do not.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RECORD = os.path.join(HERE, "virtual_times.json")
TOLERANCE = 1e-9
# Short, deterministic runs: modelled compute, the nano model, one thread; every step logged.
# Short, deterministic runs: modelled compute, one thread, every step logged; the nano model and 24
# steps where the scenario allows them (its faults may be scheduled later, its entries may need more
# layers): the first of these that the scenario accepts.
COMMON = ["compute.mode=modelled", "threads=1", "eval.batches=1", "device=cpu", "output.log_every=1"]
TRAINED = [["model.preset=nano", "train.steps=24"], ["model.preset=nano"], ["train.steps=24"], []]
SIZES = [["train.steps=24"], []]


def run(narrows, scenario, mode, out, sets):
    name = f"{os.path.basename(scenario)[:-5]}-{mode}"
    cmd = [narrows, "run", scenario, "-q", "--set", f"name={name}", "--set", f"output.dir={out}"]
    for s in COMMON + sets:
        cmd += ["--set", s]
    if mode == "sizes-only":
        cmd.append("--sizes-only")
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    if p.returncode == 2:
        return None, p.stderr  # a setting the scenario does not accept (it says which, exit 2)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    times = {}
    for r in json.load(open(f"{out}/{name}/summary.json"))["results"]:
        steps = []
        metrics = f"{out}/{name}/{r['name']}/metrics.jsonl"
        if os.path.exists(metrics):
            for line in open(metrics):
                m = json.loads(line)
                if "virtual_time_s" in m and "step" in m:
                    steps.append([m["step"], m["virtual_time_s"]])
        times[r["name"]] = {"end": r["virtual_time_s"], "steps": steps}
    return times, ""


def collect(narrows, recorded):
    """Runs every scenario in both modes: with the settings of the record where it has the run, else
    with the first of the candidate settings that the scenario accepts."""
    out = tempfile.mkdtemp(prefix="virtual-times-")
    got = {}
    for scenario in sorted(glob.glob(os.path.join(ROOT, "scenarios", "*.yaml"))):
        key = os.path.basename(scenario)
        for mode in ("trained", "sizes-only"):
            run_key = f"{key} {mode}"
            candidates = [recorded[run_key]["sets"]] if run_key in recorded else (
                TRAINED if mode == "trained" else SIZES)
            why = ""
            for sets in candidates:
                times, why = run(narrows, scenario, mode, out, sets)
                if times is not None:
                    got[run_key] = {"sets": sets, "entries": times}
                    print(f"{run_key} ({' '.join(sets) or 'as written'}): {len(times)} entries", flush=True)
                    break
            else:
                if run_key in recorded or mode == "trained":
                    sys.exit(f"{run_key}: refused\n{why}")
    subprocess.run(["rm", "-rf", out])
    return got


def close(a, b):
    return abs(a - b) <= TOLERANCE * max(abs(a), abs(b), 1e-12)


def compare(want, got):
    """The differences past the tolerance, and the largest relative difference seen."""
    bad = []
    worst = [0.0, ""]

    def note(a, b, where):
        d = abs(a - b) / max(abs(a), abs(b), 1e-12)
        if d > worst[0]:
            worst[:] = [d, where]
    for run_key in sorted(set(want) | set(got)):
        if run_key not in got or run_key not in want:
            bad.append(f"{run_key}: {'not run now' if run_key not in got else 'not in the record'}")
            continue
        for entry, w in want[run_key]["entries"].items():
            g = got[run_key]["entries"].get(entry)
            if g is None:
                bad.append(f"{run_key} {entry}: no such entry now")
                continue
            note(w["end"], g["end"], f"{run_key} {entry} end")
            if not close(w["end"], g["end"]):
                bad.append(f"{run_key} {entry}: ends at {g['end']!r} s, recorded {w['end']!r} s")
            if len(w["steps"]) != len(g["steps"]):
                bad.append(f"{run_key} {entry}: {len(g['steps'])} logged steps, recorded {len(w['steps'])}")
                continue
            for (ws, wt), (gs, gt) in zip(w["steps"], g["steps"]):
                note(wt, gt, f"{run_key} {entry} step {gs}")
                if ws != gs or not close(wt, gt):
                    bad.append(f"{run_key} {entry}: step {gs} at {gt!r} s, recorded step {ws} at {wt!r} s")
                    break
    return bad, worst


def write_record(got):
    """One line per run and entry: small diffs when a record is taken again."""
    with open(RECORD, "w") as f:
        f.write("{\n")
        runs = sorted(got)
        for i, run_key in enumerate(runs):
            f.write(f" {json.dumps(run_key)}: {{\"sets\": {json.dumps(got[run_key]['sets'])}, \"entries\": {{\n")
            entries = sorted(got[run_key]["entries"])
            for j, entry in enumerate(entries):
                sep = "," if j + 1 < len(entries) else ""
                f.write(f"  {json.dumps(entry)}: {json.dumps(got[run_key]['entries'][entry])}{sep}\n")
            f.write(" }}" + ("," if i + 1 < len(runs) else "") + "\n")
        f.write("}\n")


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("check", "record"):
        sys.exit(__doc__)
    narrows = os.path.abspath(sys.argv[1])
    recorded = json.load(open(RECORD)) if sys.argv[2] == "check" else {}
    got = collect(narrows, recorded)
    if sys.argv[2] == "record":
        write_record(got)
        return
    bad, worst = compare(recorded, got)
    for b in bad:
        print(b)
    print(f"largest relative difference: {worst[0]:.3g}" + (f" ({worst[1]})" if worst[1] else ""))
    print(f"{len(got)} runs compared: {'all virtual times as recorded' if not bad else f'{len(bad)} differ'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
