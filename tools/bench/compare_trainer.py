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


def gpu_main(cpp, py, presets, device):
    """On a GPU: narrows against PyTorch eager and torch.compile (PyTorch's own LibTorch in the same
    process tree), interleaved the same way; model FLOP utilisation against a bf16 GEMM's measured
    peak. PRECISION (default bf16) applies to both."""
    python = os.environ.get("PYTHON", "python3")
    precision = os.environ.get("PRECISION", "bf16")
    batch = int(os.environ.get("BATCH", 16))
    peak = run([cpp, "gemm", "1", device])["gemm_gflops"]
    print(f"{device}, {precision}, batch {batch}; 8192^3 bf16 GEMM peak through LibTorch: {peak / 1e3:.0f} TFLOP/s")
    print(f"{'preset':10} {'params':>10} {'narrows tok/s':>14} {'eager tok/s':>12} {'compile tok/s':>14} "
          f"{'vs eager':>8} {'vs compile':>10} {'MFU narrows':>11} {'MFU eager':>9} {'MFU compile':>11}")
    for preset in presets:
        steps, warmup = GPU_STEPS.get(preset, (20, 5))
        rounds = int(os.environ.get("ROUNDS", 2))
        best = {"c": 0.0, "e": 0.0, "k": 0.0}
        flops = params = None
        for r in range(rounds):
            for kind in (["c", "e", "k"] if r % 2 == 0 else ["k", "e", "c"]):
                args = [preset, str(batch), "1", str(steps), str(warmup), device, precision]
                if kind == "c":
                    res = run([cpp] + args)
                    flops, params = res["flops_per_token"], res["params"]
                else:
                    res = run([python, py] + args + (["compile"] if kind == "k" else []))
                best[kind] = max(best[kind], res["tokens_per_s"])
        mfu = {k: v * flops / 1e9 / peak for k, v in best.items()}
        print(f"{preset:10} {params:10d} {best['c']:14.0f} {best['e']:12.0f} {best['k']:14.0f} "
              f"{best['c'] / best['e']:8.2f} {best['c'] / best['k']:10.2f} {mfu['c']:11.1%} {mfu['e']:9.1%} "
              f"{mfu['k']:11.1%}")
    print("targets on a GPU: narrows >= PyTorch eager, and >= 40% MFU on gpt2-124m")


GPU_STEPS = {"small": (30, 5), "medium": (20, 5), "gpt2-124m": (20, 5)}


def main():
    cpp, py = sys.argv[1], sys.argv[2]
    device = os.environ.get("DEVICE", "cpu")
    if device != "cpu":
        return gpu_main(cpp, py, sys.argv[3:] or ["medium", "gpt2-124m"], device)
    presets = sys.argv[3:] or ["tiny", "small"]
    # The ratios (best, median) measured on 2026-12-02 on a 2-core machine, one run: what the
    # target of 1.5x was set against.
    BEFORE = {"tiny": (1.29, 1.26), "small": (1.29, 1.52)}
    threads = int(os.environ.get("THREADS", os.cpu_count()))
    batch = int(os.environ.get("BATCH", 16))
    peak = run([cpp, "gemm", str(threads)])["gemm_gflops"]
    print(f"threads {threads}, batch {batch}; 2048^3 float GEMM peak through LibTorch: {peak:.1f} GFLOP/s")
    print(f"{'preset':10} {'params':>9} {'narrows tok/s':>14} {'pytorch tok/s':>14} {'ratio best':>10} "
          f"{'ratio median':>12} {'MFU narrows':>11} {'MFU pytorch':>11}")
    worst = None
    narrows_best = {}
    for preset in presets:
        steps, warmup = STEPS.get(preset, (20, 3))
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
        label = os.path.basename(preset)
        print(f"{label:10} {params:9d} {max(ours):14.0f} {max(theirs):14.0f} {best:10.2f} "
              f"{median:12.2f} {mfu_c:11.0%} {mfu_p:11.0%}")
        worst = min(best, median) if worst is None else min(worst, best, median)
        narrows_best[label] = max(ours)
        if label in BEFORE:
            print(f"{'':10} {'before':>9} {'':14} {'':14} {BEFORE[label][0]:10.2f} {BEFORE[label][1]:12.2f}")
    print(f"target: narrows >= 1.5x PyTorch on every preset, best and median; worst ratio {worst:.2f}")
    if "tiny" in narrows_best and "gpt.pt" in narrows_best:
        # The same GPT twice in narrows: built in, and as its TorchScript twin (goal: within 1.3x).
        print(f"narrows, built-in tiny over its TorchScript twin gpt.pt: "
              f"{narrows_best['tiny'] / narrows_best['gpt.pt']:.2f}x (goal: at most 1.3x)")


if __name__ == "__main__":
    main()
