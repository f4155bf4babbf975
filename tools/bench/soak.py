"""The body of tools/bench/soak (see there)."""
import argparse
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parents[2]
NARROWS = HERE / "build" / "narrows"
OUT = HERE / "tools" / "bench" / "out" / "soak"


def children(pid):
    """Processes whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its closing parenthesis.
        if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            found.append(int(entry))
    return sorted(found)


def sample(pid):
    """(resident KiB, open files, threads) of `pid`, or None once it is gone."""
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text().splitlines()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    return int(fields["VmRSS"].split()[0]), fds, int(fields["Threads"])


def main():
    ap = argparse.ArgumentParser(prog="tools/bench/soak")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--entry", default="diloco-h8")
    ap.add_argument("--sample-s", type=float, default=5.0)
    a = ap.parse_args()
    if a.minutes <= 0 or a.workers < 2 or a.sample_s <= 0:
        sys.exit("tools/bench/soak: --minutes and --sample-s must be positive and --workers at least 2")
    duration = a.minutes * 60.0
    warmup = max(60.0, duration / 5)
    if duration < warmup + 120:
        sys.exit(f"tools/bench/soak: --minutes {a.minutes} leaves no minute to compare after the warm-up "
                 f"({warmup:.0f} s) and before the last minute: give at least {(warmup + 120) / 60:.1f}")
    shutil.rmtree(OUT / "soak", ignore_errors=True)  # an earlier soak's metrics
    OUT.mkdir(parents=True, exist_ok=True)
    # More steps than the time allows: the run is stopped at the deadline.
    cmd = [str(NARROWS), "launch", "--local", str(a.workers), "scenarios/quickstart.yaml", "-q",
           "--set", "name=soak", "--set", f"output.dir={OUT}", "--set", "model.preset=nano",
           "--set", f"workers.count={a.workers}", "--set", "train.steps=10000000",
           "--set", "train.batch_size=4", "--set", "eval.every=200", "--set", "eval.batches=2",
           "--set", "output.log_every=50", "--set", f"compare=[{a.entry}]"]
    # The launcher's output goes to a file, not a pipe that nobody reads while the run goes on.
    progress = open(OUT / "soak.log", "w")
    launcher = subprocess.Popen(cmd, cwd=HERE, start_new_session=True, stdout=progress, stderr=subprocess.STDOUT,
                                text=True)
    samples = {}  # pid -> [(t, rss, fds, threads)]
    names = {}  # pid -> "rank R", from its command line
    start = time.monotonic()
    try:
        while time.monotonic() - start < duration:
            if launcher.poll() is not None:
                sys.exit(f"tools/bench/soak: the deployment ended early (exit {launcher.returncode}); "
                         f"its output: {OUT / 'soak.log'}")
            t = time.monotonic() - start
            for pid in [launcher.pid] + children(launcher.pid):
                s = sample(pid)
                if pid not in names and pid != launcher.pid:
                    try:
                        args = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                        names[pid] = "rank " + args[args.index(b"--rank") + 1].decode()
                    except (OSError, ValueError, IndexError):
                        pass
                if s is not None:
                    samples.setdefault(pid, []).append((t,) + s)
            time.sleep(a.sample_s)
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
    print(f"soak: {a.workers} workers, {a.entry}, {a.minutes:g} min; growth from the minute after "
          f"{warmup:.0f} s of warm-up to the last minute (median of each)")
    print(f"{'process':>10} {'RSS MiB':>16} {'growth':>8} {'open files':>12} {'threads':>9}")
    worst = 0.0
    for pid, rows in sorted(samples.items()):
        early = [r for r in rows if warmup <= r[0] < warmup + 60]
        late = [r for r in rows if r[0] >= duration - 60]
        if not early or not late:
            print(f"{pid:>10} (gone before the end: {len(rows)} samples)")
            continue
        rss = [statistics.median(r[1] for r in part) / 1024 for part in (early, late)]
        fds = [statistics.median(r[2] for r in part) for part in (early, late)]
        thr = [statistics.median(r[3] for r in part) for part in (early, late)]
        growth = (rss[1] - rss[0]) / rss[0] * 100
        worst = max(worst, abs(growth), abs(fds[1] - fds[0]) / max(fds[0], 1) * 100)
        name = "launcher" if pid == launcher.pid else names.get(pid, f"pid {pid}")
        print(f"{name:>10} {rss[0]:>7.1f} → {rss[1]:>6.1f} {growth:>+7.2f}% {fds[0]:>5.0f} → {fds[1]:<4.0f} "
              f"{thr[0]:>4.0f} → {thr[1]:<3.0f}")
    progress.close()
    verdict = "flat within 1%" if worst <= 1.0 else "NOT flat within 1%"
    print(f"largest growth {worst:.2f}%: {verdict}")


if __name__ == "__main__":
    main()
