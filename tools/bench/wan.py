"""The body of tools/bench/wan (see there)."""
import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parents[2]
NARROWS = HERE / "build" / "narrows"
BENCH = HERE / "build" / "bench_allreduce"
PREFIX = "narrows-wan"


def streams_auto(bandwidth_bps, rtt_s):
    """What deploy.bulk_streams: auto picks (deploy/zmq_transport.h BulkStreamsFor)."""
    wmem_max = 4 << 20
    try:
        wmem_max = int(open("/proc/sys/net/ipv4/tcp_wmem").read().split()[2])
    except (OSError, IndexError, ValueError):
        pass
    return max(1, min(16, -(-int(bandwidth_bps * rtt_s / 8) // (wmem_max // 2))))


def one(impl, count, iters, port, tmp, ahead=0):
    """Runs rank 0 and rank 1 of `bench_allreduce one` in the two namespaces (the ring sending
    `ahead` bytes beyond what it received); seconds or None."""
    out = pathlib.Path(tmp) / "result"
    out.unlink(missing_ok=True)
    key = pathlib.Path(str(out) + ".key")  # where bench_allreduce reads the cluster key under CURVE
    if "curve" in impl and not key.exists():
        subprocess.run([str(NARROWS), "keygen", str(key)], check=True, stdout=subprocess.DEVNULL)
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, BENCH_BIND=f"10.77.0.{rank + 1}", BENCH_SEND_AHEAD=str(ahead))
        cmd = ["ip", "netns", "exec", f"{PREFIX}-{rank}", str(BENCH), "one", impl, str(rank), "2", str(count),
               str(iters), f"10.77.0.1:{port}", str(out)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    errors = [p.communicate(timeout=900)[1] for p in procs]
    if any(p.returncode != 0 for p in procs) or not out.exists():
        sys.stderr.write(f"{impl}: failed\n{''.join(errors)}")
        return None
    return float(out.read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--latencies", default="50,150", help="one-way latencies (ms), comma-separated")
    ap.add_argument("--tests", default="p2p,ring,ring-bdp", help="a subset of p2p,ring,ring-bdp")
    a = ap.parse_args()
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        print("tools/bench/wan needs root and /dev/net/tun (network namespaces and TUN devices)", file=sys.stderr)
        return 2
    count = a.mb * 1000 * 1000 // 4
    port = 29700
    print(f"{a.mb} MB between two processes through the link emulator; median of {a.iters}")
    print(f"{'link':<24} {'test':<10} {'transport':<16} {'time (s)':>9} {'Mbit/s':>8} {'of link':>8}")
    tests = a.tests.split(",")
    for latency_ms in [int(x) for x in a.latencies.split(",")]:
        bandwidth = 1e9
        k_auto = streams_auto(bandwidth, 2 * latency_ms / 1000)
        with tempfile.TemporaryDirectory() as tmp:
            sc = pathlib.Path(tmp) / "wan.yaml"
            sc.write_text("name: wan\nmodel: {preset: nano}\nworkers: {count: 2}\n"
                          f"network: {{bandwidth_bps: {bandwidth}, latency_ms: {latency_ms}}}\n"
                          "train: {steps: 1, batch_size: 1}\ncompare: [ddp]\n")
            emu = subprocess.Popen([str(NARROWS), "linkemu", str(sc), "--prefix", PREFIX], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
            for _ in range(100):
                if os.path.exists(f"/run/netns/{PREFIX}-1"):
                    break
                time.sleep(0.1)
            link = f"1 Gbit/s, {latency_ms} ms one-way"
            bdp = int(bandwidth * 2 * latency_ms / 1000 / 8)
            auto = (f"narrows-bulk{k_auto}", f"bulk, auto ({k_auto})")
            everything = [("narrows", "zeromq"), ("narrows-bulk1", "bulk, 1"), ("narrows-bulk2", "bulk, 2"),
                          ("narrows-bulk4", "bulk, 4"), ("narrows-bulk8", "bulk, 8"), auto]
            encrypted = [("narrows-curve", "zeromq, CURVE"), (f"narrows-curve-bulk{k_auto}", f"sealed, auto ({k_auto})")]
            for test, impls, ahead in [("p2p", everything + encrypted, 0), ("ring", [everything[0], auto], 0),
                                       ("ring, bdp", [everything[0], everything[1], auto], bdp)]:
                if test.replace(", ", "-") not in tests:
                    continue
                for impl, label in impls:
                    port += 1
                    t = one(("p2p-" if test == "p2p" else "") + impl, count, a.iters, port, tmp, ahead)
                    if t is None:
                        print(f"{link:<24} {test:<10} {label:<16} {'failed':>9}")
                        continue
                    # p2p: S bytes one way; the 2-rank ring: S bytes each way (S/2 reduce-scattered, S/2 gathered).
                    mbps = count * 4 * 8 / t / 1e6
                    print(f"{link:<24} {test:<10} {label:<16} {t:9.2f} {mbps:8.0f} {mbps / (bandwidth / 1e6):7.0%}",
                          flush=True)
            emu.send_signal(2)
            tail = emu.communicate(timeout=60)[0].strip().splitlines()
            print("  " + (tail[-1] if tail else "link emulator: no report"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
