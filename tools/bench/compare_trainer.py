"""Driver of tools/bench/trainer: interleaves runs of the C++ and the Python trainer (A, B, B, A, ...)
so that both meet the same machine noise, and compares the best and the median of each.

The machines are shared and their speed drifts by tens of percent over minutes. Each program times
every step; the fastest step over all interleaved rounds is the figure least disturbed by other
tenants ("best"), and the median step of the median round is shown beside it."""
import json
import os
import statistics
import subprocess
import sys

STEPS = {"nano": (60, 10), "tiny": (20, 3), "small": (6, 1), "medium": (3, 1), "gpt2-124m": (2, 1)}


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    cpp, py = sys.argv[1], sys.argv[2]
    presets = sys.argv[3:] or ["tiny", "small"]
    threads = int(os.environ.get("THREADS", os.cpu_count()))
    batch = int(os.environ.get("BATCH", 16))
    peak = run([cpp, "gemm", str(threads)])["gemm_gflops"]
    print(f"threads {threads}, batch {batch}; 2048^3 float GEMM peak through LibTorch: {peak:.1f} GFLOP/s")
    print(f"{'preset':10} {'params':>9} {'narrows tok/s':>14} {'pytorch tok/s':>14} {'ratio best':>10} "
          f"{'ratio median':>12} {'MFU narrows':>11} {'MFU pytorch':>11}")
    worst = None
    for preset in presets:
        steps, warmup = STEPS[preset]
        rounds = int(os.environ.get("ROUNDS", 5 if steps >= 30 else 3))
        ours, theirs = [], []
        flops = None
        for r in range(rounds):
            order = [("c", cpp), ("p", py)] if r % 2 == 0 else [("p", py), ("c", cpp)]
            for kind, prog in order:
                args = [preset, str(batch), str(threads), str(steps), str(warmup)]
                cmd = [prog] + args if kind == "c" else ["/usr/bin/python3", prog] + args
                res = run(cmd)
                if kind == "c":
                    ours.append((res["tokens_per_s"], res["median_tokens_per_s"]))
                    flops, params = res["flops_per_token"], res["params"]
                else:
                    theirs.append((res["tokens_per_s"], res["median_tokens_per_s"]))
        median = statistics.median(m for _, m in ours) / statistics.median(m for _, m in theirs)
        ours, theirs = [b for b, _ in ours], [b for b, _ in theirs]
        best = max(ours) / max(theirs)
        mfu_c = max(ours) * flops / 1e9 / peak
        mfu_p = max(theirs) * flops / 1e9 / peak
        print(f"{preset:10} {params:9d} {max(ours):14.0f} {max(theirs):14.0f} {best:10.2f} "
              f"{median:12.2f} {mfu_c:11.0%} {mfu_p:11.0%}")
        worst = best if worst is None else min(worst, best)
    print(f"target: narrows >= 1.2x PyTorch on every preset; worst ratio (best of rounds) {worst:.2f}")


if __name__ == "__main__":
    main()
