#!/usr/bin/env bash
# Reproduces the first part of docs/results/papers.md (the papers' setting: a warm start, DiLoCo Tables
# 2 and 3, H, the outer learning rate): two streams of runs side by side, one thread each, modelled
# compute (identical numbers every time), every run on seeds 0-2 (0-4 for Table 2, table2.yaml, and
# for Table 3's i.i.d. against non-i.i.d. grid and its runs at 64 replicas) with the warm start
# pre-trained once per seed and setting (cached under runs/papers). Resumable: finished seeds and
# points are not run again. About 7 hours on 2 cores.
# Usage: docs/results/papers/papers.sh [PATH_TO_NARROWS]   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../../.."
narrows=${1:-build/narrows}
d=docs/results/papers
(
  "$narrows" run $d/table2.yaml -q
  "$narrows" run $d/table2.yaml -q --set workers.count=1 --set name=table2-baseline --set 'compare=[ddp]'
  "$narrows" run $d/table2.yaml -q --set workers.count=1 --set name=table2-baseline-8x --set 'compare=[ddp]' \
    --set train.steps=2400
  "$narrows" run $d/h.yaml -q
  "$narrows" sweep $d/outer-lr.yaml -q --grid workers.count=2,8
  # Table 2's DiLoCo at the outer learning rate the sweep chose at M = 8, H = 50 (1.0 of 0.4, 0.7,
  # 1.0), on Table 2's five seeds: the comparison with a tuned DiLoCo.
  "$narrows" run $d/table2.yaml -q --set name=table2-tuned \
    --set 'compare=[{name: diloco-h50-lr1.0, algorithm: diloco, inner_steps: 50, outer_lr: 1.0}]'
) > runs/papers-stream-1.log 2>&1 &
(
  "$narrows" sweep $d/table3.yaml -q --grid workers.count=1,4,8,16 --grid data.sampling=iid,non-iid
  # At 64 replicas on five seeds too (the non-i.i.d. gap there is under 0.05 nats), about 40 minutes
  # of one core a seed each.
  "$narrows" run $d/table3.yaml -q --set workers.count=64 --set name=table3-64 --set seeds=5
  "$narrows" run $d/table3.yaml -q --set workers.count=64 --set data.sampling=non-iid --set name=table3-64-non-iid \
    --set seeds=5
  # The same grid on five seeds (0-2 copied from the sweep above if it is there): the i.i.d. against
  # non-i.i.d. gap is under 0.05 nats.
  [ -d runs/papers/table3-5seeds-sweep ] || [ ! -d runs/papers/table3-sweep ] ||
    cp -r runs/papers/table3-sweep runs/papers/table3-5seeds-sweep
  "$narrows" sweep $d/table3.yaml -q --grid workers.count=1,4,8,16 --grid data.sampling=iid,non-iid \
    --set seeds=5 --set name=table3-5seeds
) > runs/papers-stream-2.log 2>&1 &
wait
