"""The body of tools/bench/fidelity (see there)."""
import functools
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parents[2]
# NARROWS=PATH: another build's narrows (to compare two versions of a model on the same real runs).
NARROWS = pathlib.Path(os.environ.get("NARROWS") or HERE / "build" / "narrows")
SCENARIO = HERE / "tools" / "bench" / "fidelity.yaml"
OUT = HERE / "tools" / "bench" / "out" / "fidelity"
ENTRIES = {"ddp": "{algorithm: ddp, overlap: false, name: ddp}", "diloco-h8": "diloco-h8"}
# The predictions: the analytic model as a flow model (alpha + S/B), the analytic model with its
# window (slow start from 10 segments, restarted after an idle RTO with Linux's 0.2 s minimum), the
# same with ACKs loading the reverse path (one 52-byte ACK per two segments), and ns-3.
ACKS = ["--set", "network.model=analytic", "--set", "network.analytic.slow_start=true",
        "--set", "network.analytic.min_rto_s=0.2", "--set", "network.analytic.acks=true"]
MODELS = {"analytic": ["--set", "network.model=analytic"],
          "analytic-ss": ["--set", "network.model=analytic", "--set", "network.analytic.slow_start=true",
                          "--set", "network.analytic.min_rto_s=0.2"],
          "analytic-acks": ACKS,
          "analytic-host": None,  # +acks with the host work measured on loopback (host_rate)
          "ns3": ["--set", "network.model=ns3"],
          # ns-3 with the link emulator's queues (linkemu only): every host's egress and switch port a
          # drop-tail queue of the emulator's depth (100 ms at the link's bandwidth, or the network's
          # queue_ms), instead of a Linux host's fq_codel and a switch port of one bandwidth-delay
          # product. With the link emulator the analytic window's columns have its queues too.
          "ns3-dt": None,
          # The last analytic column and ns-3 dt again, each real run predicted with the compute it
          # measured step by step (compute.trace: its metrics.jsonl, each step's own host time), the
          # predictions averaged: a calibration from the mean leaves out the steps a worker was slow
          # in, which a synchronous algorithm waits for (on 2 cores shared by 4 workers, 7-17% from
          # step to step).
          "analytic-trace": None,
          "ns3-dt-trace": None}
LABELS = {"analytic": "analytic", "analytic-ss": "+window", "analytic-acks": "+acks", "analytic-host": "+host",
          "ns3": "ns-3", "ns3-dt": "ns-3 dt", "analytic-trace": "+trace", "ns3-dt-trace": "ns-3 dt +t"}
LINKEMU_QUEUE_S = 0.1  # the link emulator's default queue depth in time at the link's bandwidth
HOST_WORK_PROBE = 1e9  # bytes/s: the rate host_rate predicts the loopback run with
RATES = [50, 200]


def run(cmd):
    subprocess.run([str(c) for c in cmd], check=True, stdout=subprocess.DEVNULL)


def metrics(name, entry):
    """The lines of a run's metrics.jsonl, parsed."""
    return [json.loads(l) for l in (OUT / name / entry / "metrics.jsonl").read_text().splitlines()]


def result(name, entry):
    summary = json.loads((OUT / name / "summary.json").read_text())
    last = metrics(name, entry)[-1]
    per_worker = [w["compute_s"] for w in last["workers"]]
    return summary["results"][0]["time_s"], per_worker, last["step"]


STEADY_FROM = 9  # the steady state: from the step after DiLoCo H=8's first outer step (16 of 24 steps)


def steady(name, entry):
    """Seconds per step from step STEADY_FROM on: without the first steps, where a real TCP's slow
    start overshoots the path and recovers from the loss it caused (a transient the models lack)."""
    times = []
    for d in metrics(name, entry):
        t = d.get("wall_time_s", d.get("virtual_time_s"))
        if t is not None:
            times.append((d["step"], t))
    times.sort()
    before = [t for step, t in times if step == STEADY_FROM - 1]
    last_step, last = times[-1]
    if not before or last_step < STEADY_FROM:
        return None
    return (last - before[0]) / (last_step - STEADY_FROM + 1)


# Through the link emulator (narrows launch --network): each network as (label, --set overrides).
# (The scenario file's own bandwidth and latency keys would override a profile: the profiles'
# values are given explicitly.)
# near-100m and wan-1g-30ms (not run by default) separate bandwidth from latency: home-100m's
# bandwidth without its latency, and internet-1g's bandwidth at home-100m's latency; shallow-100m
# and shallow-1g (not run by default) have queues shorter than their round trip, which a ring
# phase's burst overflows: home-100m with 50 ms, wan-1g-30ms with 5 ms; shallow-1g-nic2g is
# shallow-1g with each worker's interface at 2 Gbit/s (network.nic_bps, in the link emulator and in
# ns-3 alike), so that a burst reaches a queue at one pace, not at the pace of the forwarder's reads.
LINKEMU = [("home-100m", ["network.bandwidth_bps=100e6", "network.latency_ms=30"]),
           ("internet-1g", ["network.bandwidth_bps=1e9", "network.latency_ms=50"]),
           ("lossy-100m", ["network.bandwidth_bps=100e6", "network.latency_ms=30", "network.loss=0.01"]),
           ("near-100m", ["network.bandwidth_bps=100e6", "network.latency_ms=1"]),
           ("wan-1g-30ms", ["network.bandwidth_bps=1e9", "network.latency_ms=30"]),
           ("shallow-100m", ["network.bandwidth_bps=100e6", "network.latency_ms=30", "network.queue_ms=50"]),
           ("shallow-1g", ["network.bandwidth_bps=1e9", "network.latency_ms=30", "network.queue_ms=5"]),
           ("shallow-1g-nic2g", ["network.bandwidth_bps=1e9", "network.latency_ms=30", "network.queue_ms=5",
                                 "network.nic_bps=2e9"])]
DEFAULT_NETWORKS = ["home-100m", "internet-1g", "lossy-100m"]


def forwarder(name):
    """What the link emulator cost a real run (its links.json): its CPU as a share of one core, and
    how late it wrote the packets it delivered (its own delay, which lengthens the real round trips
    and which no model has). None where the run has no links.json."""
    path = OUT / name / "links.json"
    if not path.exists():
        return None
    links = json.loads(path.read_text())
    delivered = links.get("delivered", 0)  # every link's together (narrows linkemu sums them)
    return {"cpu": links["cpu_s"] / links["seconds"] if links["seconds"] > 0 else 0.0,
            "late_ms": 1e3 * links["late_mean_s"] if delivered else None,
            "late_max_ms": 1e3 * links.get("late_max_s", 0.0),
            "over_1ms": links.get("late_over_1ms", 0) / delivered if delivered else None}


def calibration(names, entry, flops):
    """The emulator's compute for real runs `names` (one name, or the repeats of one cell): each
    worker computes as long as it did, on average over the runs; and the runs' seconds per step."""
    names = [names] if isinstance(names, str) else names
    results = [result(n, entry) for n in names]
    per_worker = [sum(r[1][w] for r in results) / len(results) for w in range(len(results[0][1]))]
    real_compute = sum(per_worker) / len(per_worker)
    speeds = ", ".join(f"{real_compute / c:.4f}" for c in per_worker)
    per_step = [real_t / steps for real_t, _, steps in results]
    return ["--set", "compute.mode=modelled", "--set", f"compute.device_flops={flops / real_compute:.6g}",
            "--set", f"workers.speed=[{speeds}]"], sum(per_step) / len(per_step), per_step


def repeat_names(name, repeats):
    """The runs of one cell repeated: NAME, then NAME-2, NAME-3, ..."""
    return [name] + [f"{name}-{k}" for k in range(2, repeats + 1)]


def real_runs(names, reuse, what, command):
    """Makes the real runs `names` with `command(name)`; with --reuse checks that they are there."""
    for name in names:
        if not reuse:
            run(command(name))
        elif not (OUT / name / "summary.json").exists():
            sys.exit(f"tools/bench/fidelity --reuse: no {what} run at {OUT / name} (run the bench without --reuse first)")


@functools.cache
def scaling_table():
    """docs/scaling/table.py, loaded once."""
    spec = importlib.util.spec_from_file_location("scaling_table", HERE / "docs" / "scaling" / "table.py")
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    return table


def half_width(values):
    """The 95% t-interval's half-width of the mean of `values` (None for one value): the scaling
    study's mean_hw (docs/scaling/table.py), which the results' tables use too."""
    return None if len(values) < 2 else scaling_table().mean_hw(values)[1]


def host_rate(entry, spec, flops, common, reuse, repeats=1):
    """The rate at which the real workers' hosts handle message bytes outside the network
    (compute.host_bytes_per_s): the real run on loopback, where the network costs next to nothing,
    predicted on a near-infinite network without host work and with it at HOST_WORK_PROBE; host
    time scales as 1 / rate there. None where the loopback run is no slower than the prediction
    without host work. Measured on DDP, which synchronises every step (DiLoCo's host work is an
    eighth as large, under the loopback run's noise), and used for every entry: it is the host's.
    With `repeats` the loopback run is made that many times and the rate is the mean run's: it is
    the difference of two close step times, so one run's noise moves it a lot."""
    names = repeat_names(f"loop-{entry}", repeats)
    sets = [*common, "--set", f"compare=[{spec}]"]
    real_runs(names, reuse, "loopback", lambda name: [NARROWS, "launch", "--local", 4, SCENARIO, "-q", *sets,
                                                      "--set", f"name={name}"])
    compute, real, per_run = calibration(names, entry, flops)
    fast = ["--set", "network.bandwidth_bps=1e12", "--set", "network.latency_ms=0.001"]
    t = {}
    for label, host in (("free", []), ("probe", ["--set", f"compute.host_bytes_per_s={HOST_WORK_PROBE:g}"])):
        name = f"loop-pred-{label}-{entry}"
        run([NARROWS, "run", SCENARIO, "-q", "--force", *sets, *fast, *compute, *host, "--set", f"name={name}"])
        seconds, _, steps = result(name, entry)
        t[label] = seconds / steps
    if real <= t["free"]:
        return None
    rate = HOST_WORK_PROBE * (t["probe"] - t["free"]) / (real - t["free"])
    print(f"host work {entry}: loopback {', '.join(f'{x:.4f}' for x in per_run)} s/step, predicted "
          f"{t['free']:.4f} without host work: {rate / 1e6:.0f} MB/s", file=sys.stderr)
    return rate


def print_errors(rows, models, times, label="", note=""):
    """Each row's seconds per step, measured and predicted by each model (`times(row)` holds them
    by "real" and model), with the error, then each model's mean and max |error| (its line: the
    model, `label`, the figures, `note`)."""
    spread = any(t.get("real_hw") is not None for t in map(times, rows))
    print(f"{'network':>11} {'entry':<10} {'real s/step':>11} " + (f"{'± 95%':>7} " if spread else "") +
          " ".join(f"{LABELS[m]:>9} {'error':>7}" for m in models))
    errors = {m: [] for m in models}
    within = {m: 0 for m in models}  # errors inside the real runs' interval: not told from their noise
    for r in rows:
        t = times(r)
        e = {m: (t[m] - t["real"]) / t["real"] for m in models}
        hw = t.get("real_hw")
        for m in models:
            errors[m].append(abs(e[m]))
            if hw is not None and abs(t[m] - t["real"]) <= hw:
                within[m] += 1
        cell = "" if hw is None else f"{100 * hw / t['real']:.1f}%"
        print(f"{r['rate']:>11} {r['entry']:<10} {t['real']:>11.3f} " + (f"{cell:>7} " if spread else "") +
              " ".join(f"{t[m]:>9.3f} {100 * e[m]:>+6.1f}%" for m in models))
    for m, errs in errors.items():
        inside = f"; {within[m]} of {len(errs)} within the real runs' 95% interval" if spread else ""
        print(f"{m}{label}: mean |error| {100 * sum(errs) / len(errs):.1f}%, max {100 * max(errs):.1f}%{inside}{note}")


def main():
    linkemu = "--linkemu" in sys.argv[1:]
    # --reuse: the real runs already under OUT are read back, not run again (predictions only).
    reuse = "--reuse" in sys.argv[1:]
    # --real DIR: the real runs are those archived in DIR (docs/fidelity/real-DATE), copied under OUT
    # and reused (predictions only).
    if "--real" in sys.argv[:-1]:
        archived = pathlib.Path(sys.argv[sys.argv.index("--real") + 1])
        if not archived.is_dir():
            sys.exit(f"tools/bench/fidelity: --real {archived}: no such folder")
        for run_dir in archived.iterdir():
            shutil.copytree(run_dir, OUT / run_dir.name, dirs_exist_ok=True)
        reuse = True
    # --repeats N: N real runs of each network and entry, predicted from their mean compute and
    # compared with their mean, whose 95% interval is printed beside it (the real runs' own noise);
    # and N loopback runs for the hosts' rate.
    given = sys.argv[sys.argv.index("--repeats") + 1] if "--repeats" in sys.argv[:-1] else "1"
    if not given.isdigit() or int(given) < 1:
        sys.exit(f"tools/bench/fidelity: --repeats takes a count of 1 or more, not '{given}'")
    repeats = int(given)
    # The real side's TCP congestion control and the ns-3 model's, the same (linkemu only).
    tcp = sys.argv[sys.argv.index("--tcp") + 1] if "--tcp" in sys.argv else "cubic"
    # --models a,b: only these columns (each trace column needs its base: analytic-host or
    # analytic-acks, ns3-dt); default all.
    if "--models" in sys.argv[:-1]:
        chosen_models = sys.argv[sys.argv.index("--models") + 1].split(",")
        unknown = [m for m in chosen_models if m not in MODELS]
        if unknown:
            sys.exit(f"tools/bench/fidelity: unknown model {', '.join(unknown)} (known: {', '.join(MODELS)})")
        for m in list(MODELS):
            if m not in chosen_models:
                del MODELS[m]
    OUT.mkdir(parents=True, exist_ok=True)
    common = ["--set", f"output.dir={OUT}"]
    # FLOPs of each entry's compute per worker: modelled at 1 TFLOP/s, read back.
    flops = {}
    for entry, spec in ENTRIES.items():
        name = f"flops-{entry}"
        run([NARROWS, "run", SCENARIO, "-q", "--force", *common, "--set", f"compare=[{spec}]", "--set", f"name={name}",
             "--set", "compute.mode=modelled", "--set", "compute.device_flops=1e12"])
        _, compute, steps = result(name, entry)
        flops[entry] = sum(compute) / len(compute) * 1e12
    host = host_rate("ddp", ENTRIES["ddp"], flops["ddp"], common, reuse, repeats) if linkemu else None
    if host is not None:
        LABELS.update({"ns3": "ns-3 +h", "ns3-dt": "ns-3dt +h"})
    rows = []
    # --networks a,b: the link emulator's networks to run (default all of LINKEMU).
    chosen = sys.argv[sys.argv.index("--networks") + 1].split(",") if "--networks" in sys.argv else DEFAULT_NETWORKS
    unknown = [n for n in chosen if n not in dict(LINKEMU)]
    if unknown:
        sys.exit(f"tools/bench/fidelity: unknown network {', '.join(unknown)} (known: {', '.join(n for n, _ in LINKEMU)})")
    networks = [(label, [x for o in overrides for x in ("--set", o)]) for label, overrides in LINKEMU if label in chosen] \
        if linkemu else [(rate, ["--set", f"network.bandwidth_bps={rate}e6"]) for rate in RATES]
    for rate, network in networks:
        for entry, spec in ENTRIES.items():
            sets = [*common, "--set", f"compare=[{spec}]", *network]
            real_name = f"real-{rate}-{entry}"
            real_names = repeat_names(real_name, repeats)
            # Each step's own compute recorded (compute.statistic: each), for the trace columns.
            each = ["--set", "compute.statistic=each"]
            real_runs(real_names, reuse, "real", lambda name: (
                [NARROWS, "launch", "--local", 4, SCENARIO, "-q", "--network", "scenario", "--tcp", tcp, *sets, *each,
                 "--set", f"name={name}"] if linkemu else
                [HERE / "tools" / "netns", "--rate", rate, SCENARIO, "-q", *sets, *each, "--set", f"name={name}"]))
            compute, real, per_run = calibration(real_names, entry, flops[entry])
            steadies = [steady(n, entry) for n in real_names]
            row = {"rate": rate, "entry": entry, "real": real, "real_hw": half_width(per_run),
                   "steady": {"real": None if None in steadies else sum(steadies) / len(steadies),
                              "real_hw": None if None in steadies else half_width(steadies)}}
            # The link emulator's queue depth, which the predictions with bursts (the analytic window,
            # ns-3 dt) are given: the network's own, or the emulator's default.
            own_queue = linkemu and any(o.startswith("network.queue_ms=") for o in dict(LINKEMU)[rate])
            queue = ["--set", f"network.queue_ms={LINKEMU_QUEUE_S * 1000:g}"] if linkemu and not own_queue else []
            for model, model_sets in MODELS.items():
                if model.endswith("-trace"):
                    continue  # below, once the others are made
                if model == "analytic-host":
                    if host is None:
                        continue
                    model_sets = [*ACKS, "--set", f"compute.host_bytes_per_s={host:.6g}"]
                if model == "ns3-dt":
                    if not linkemu:
                        continue
                    model_sets = ["--set", "network.model=ns3", "--set", "network.ns3.host_qdisc=drop_tail"]
                if model.startswith("ns3") and host is not None:
                    # ns-3 with the hosts' work too, as the last analytic column has it.
                    model_sets = [*model_sets, "--set", f"compute.host_bytes_per_s={host:.6g}"]
                if model != "analytic" and model != "ns3":
                    model_sets = [*model_sets, *queue]
                name = f"pred-{model}-{rate}-{entry}"
                variant = ["--set", f"network.ns3.tcp={'newreno' if tcp == 'reno' else tcp}"] \
                    if linkemu and model.startswith("ns3") else []
                run([NARROWS, "run", SCENARIO, "-q", "--force", *sets, *variant, "--set", f"name={name}", *model_sets, *compute])
                seconds, _, steps = result(name, entry)
                row[model] = seconds / steps
                row["steady"][model] = steady(name, entry)
            for model, base in (("analytic-trace", "analytic-host" if host is not None else "analytic-acks"),
                                ("ns3-dt-trace", "ns3-dt")):
                if base not in row:
                    continue
                # The base column's scenario, each real run's compute replayed in it.
                base_scenario = OUT / f"pred-{base}-{rate}-{entry}" / "scenario.yaml"
                predicted, steadies_run = [], []
                for n in real_names:
                    name = f"pred-{model}-{n[len('real-'):]}"
                    run([NARROWS, "run", base_scenario, "-q", "--force", "--set", f"name={name}", "--set", "compute.mode=modelled",
                         "--set", f"compute.trace={OUT / n / entry / 'metrics.jsonl'}"])
                    seconds, _, steps = result(name, entry)
                    predicted.append(seconds / steps)
                    steadies_run.append(steady(name, entry))
                row[model] = sum(predicted) / len(predicted)
                row["steady"][model] = None if None in steadies_run else sum(steadies_run) / len(steadies_run)
            row["forwarder"] = forwarder(real_name) if linkemu else None
            rows.append(row)
            print(f"measured {rate} {entry}: {', '.join(f'{t:.3f}' for t in per_run)} s/step", file=sys.stderr)
    models = [m for m in MODELS if all(m in r for r in rows)]
    target = "mean <= 2%, max <= 5%" if linkemu else "mean <= 5%, max <= 10%"
    print_errors(rows, models, lambda r: r, note=f" (target: {target})")
    # The same from step STEADY_FROM on: what is left of each error without the first steps.
    if all(r["steady"]["real"] for r in rows):
        print(f"\nfrom step {STEADY_FROM} on (the first steps' slow start and its losses left out):")
        print_errors(rows, models, lambda r: r["steady"], label=f", from step {STEADY_FROM}")
    for r in rows:
        f = r["forwarder"]
        if f and f["late_ms"] is not None:
            print(f"{r['rate']}, {r['entry']}: the link emulator took {100 * f['cpu']:.0f}% of one core; it wrote "
                  f"the packets it delivered {f['late_ms']:.3f} ms after they were due on average, "
                  f"{f['late_max_ms']:.1f} ms at most, {100 * f['over_1ms']:.2f}% more than 1 ms late")
    for rate, _ in networks:
        by = {r["entry"]: r for r in rows if r["rate"] == rate}
        for m in models:
            same = (by["ddp"]["real"] < by["diloco-h8"]["real"]) == (by["ddp"][m] < by["diloco-h8"][m])
            print(f"{rate}, {m}: DDP-versus-DiLoCo ranking {'preserved' if same else 'NOT preserved'}")


if __name__ == "__main__":
    main()
