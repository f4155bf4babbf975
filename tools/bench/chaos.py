"""The body of tools/bench/chaos (see there)."""
import argparse
import json
import pathlib
import re
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parents[2]
NARROWS = HERE / "build" / "narrows"
OUT = HERE / "tools" / "bench" / "out" / "chaos"
CORPUS = [HERE / "README.md"] + sorted((HERE / "docs").glob("*.md"))


def launch(a, name, chaos):
    """Runs one deployment; returns (exit code, wall seconds)."""
    cmd = [str(NARROWS), "launch", "--local", str(a.workers), str(OUT / "chaos.yaml"), "-q", "--network", "home-100m",
           "--set", f"name={name}", "--set", f"output.dir={OUT}", "--set", f"workers.count={a.workers}",
           "--set", f"train.steps={a.steps}"]
    if chaos:
        cmd += ["--chaos", chaos]
    start = time.monotonic()
    with open(OUT / f"{name}.log", "w") as log:
        rc = subprocess.run(cmd, cwd=OUT, stdout=log, stderr=subprocess.STDOUT).returncode
    return rc, time.monotonic() - start


def replay(name):
    """Replays a run in the emulator from its membership (narrows replay); returns 'E of N' evaluations
    equal and whether all were equal bit for bit with the final loss."""
    with open(OUT / f"{name}-replay.log", "w") as log:
        rc = subprocess.run([str(NARROWS), "replay", str(OUT / name), "-q"], cwd=OUT, stdout=log,
                            stderr=subprocess.STDOUT).returncode
    text = (OUT / f"{name}-replay.log").read_text()
    m = re.search(r"^dl\s+\d+\s+(\d+ of \d+)", text, re.M)
    return (m.group(1) if m else "-"), rc == 0


def main():
    ap = argparse.ArgumentParser(prog="tools/bench/chaos")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    if a.workers < 2 or a.steps < 100 or a.kills < 0 or a.partitions < 0 or a.rounds < 1:
        sys.exit("tools/bench/chaos: --workers >= 2, --steps >= 100, --kills and --partitions >= 0, --rounds >= 1")
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    (OUT / "corpus.txt").write_text("".join(p.read_text() for p in CORPUS))
    (OUT / "chaos.yaml").write_text(
        "name: chaos\nseed: 3\nthreads: 1\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
        "train: {steps: 1000, batch_size: 4, warmup_steps: 4}\neval: {every: 500, batches: 2, batch_size: 4}\n"
        "workers: {count: 4}\noutput: {dir: out, log_every: 100}\n"
        "deploy: {security: plain, heartbeat_s: 0.1, timeout_s: 1.0, collective_timeout_s: 30}\n"
        "compare: [{algorithm: diloco, inner_steps: 10, name: dl}]\n")
    chaos = (f"{{seed: {a.seed}, kills: {a.kills}, mean_interval_s: 0.6, restart_after_s: 0.3, from_s: 1.5, "
             f"partitions: {a.partitions}, partition_interval_s: 6, partition_s: 2.5}}")
    print(f"chaos: {a.workers} workers, {a.steps} steps, --chaos '{chaos}'")
    print(f"{'run':>10} {'exit':>4} {'wall s':>8} {'kills':>6} {'restarts':>8} {'cuts':>5} {'fenced':>6} "
          f"{'joins':>6} {'all in last step':>16} {'replay: evaluations equal':>26}")
    base, storm, replays = [], [], []
    for r in range(a.rounds):
        for kind in ("base", "storm"):
            name = f"{kind}-{r}"
            rc, wall = launch(a, name, chaos if kind == "storm" else "")
            counts = {k: 0 for k in ("chaos_kill", "chaos_restart", "chaos_partition", "chaos_fenced")}
            log = OUT / name / "chaos.jsonl"
            if log.exists():
                for line in log.read_text().splitlines():
                    t = json.loads(line)["type"]
                    if t in counts:
                        counts[t] += 1
            events = OUT / name / "dl" / "events.jsonl"
            text = events.read_text() if events.exists() else ""
            joins = text.count('"type":"join"')
            last = re.search(r'"participants":\[([0-9,]*)\],"step":%d\b' % a.steps, text)
            everyone = bool(last) and last.group(1) == ",".join(str(w) for w in range(a.workers))
            equal, same = replay(name) if rc == 0 else ("-", False)
            replays.append(same)
            print(f"{name:>10} {rc:>4} {wall:>8.1f} {counts['chaos_kill']:>6} {counts['chaos_restart']:>8} "
                  f"{counts['chaos_partition']:>5} {counts['chaos_fenced']:>6} {joins:>6} {str(everyone):>16} "
                  f"{equal + (' (bit for bit)' if same else ' (DIFFERS)'):>26}", flush=True)
            (base if kind == "base" else storm).append((rc, wall, sum(counts[k] for k in ("chaos_kill", "chaos_partition"))))
    ok = all(rc == 0 for rc, _, _ in storm)
    faults = sum(f for _, _, f in storm)
    lost = sum(w for _, w, _ in storm) - sum(w for _, w, _ in base)
    print(f"storms: {faults} faults, {'all survived' if ok else 'NOT all survived'}; "
          f"time lost {lost:+.1f} s in all, {lost / max(faults, 1):+.3f} s a fault; replays "
          f"{'all equal bit for bit' if all(replays) else 'NOT all equal'} ({sum(replays)} of {len(replays)} runs)")


if __name__ == "__main__":
    main()
