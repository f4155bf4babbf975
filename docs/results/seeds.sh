#!/usr/bin/env bash
# The claims of docs/results/papers.md Part 2 whose gaps are small, over seeds 0-4 (five: the gaps are
# under 0.05 nats): dropped outer gradients, i.i.d. against non-i.i.d. data, and the outer
# optimiser (55 runs of 4 workers, about 70 s each on one core: an hour, less with the three started
# side by side; modelled compute and one thread per run, so every loss is the same run to run).
# Resumable: a finished seed is not run again. Then the tables (seeds_table.py).
# Usage: docs/results/seeds.sh [PATH_TO_NARROWS]   (from the repository root; default build/narrows)
set -euo pipefail
cd "$(dirname "$0")/../.."
narrows=${1:-build/narrows}
d=docs/results
out=(--set seeds=5 --set output.dir=runs/results-seeds)
"$narrows" run $d/dropped.yaml -q "${out[@]}"
"$narrows" sweep $d/non-iid.yaml -q "${out[@]}" --grid data.sampling=iid,non-iid
"$narrows" run $d/outer-optimizer.yaml -q "${out[@]}"
# DiLoCo against DDP with H from 10 to 500, 4 and 8 workers, over seeds 0-2 (the gaps are 0.1-0.9
# nats; 30 runs: those of 4 workers about 20 minutes on one core; those of 8 took 105 minutes beside
# other work, at nice 19 and paused at times, so not a timing).
"$narrows" sweep $d/k-and-h.yaml -q --set seeds=3 --set output.dir=runs/results-seeds --grid workers.count=4,8
# The number of workers at M = 1 and 2 (4 and 8 are k-and-h's) and the growing and shrinking pools,
# over seeds 0-2 (18 runs; the pools' at nice 19 beside other work took about 30 minutes each on one
# core). M = 16 below, one seed a run.
"$narrows" sweep $d/workers.yaml -q --set seeds=3 --set output.dir=runs/results-seeds --grid workers.count=1,2
"$narrows" run $d/growing.yaml -q --set seeds=3 --set output.dir=runs/results-seeds
"$narrows" run $d/shrinking.yaml -q --set seeds=3 --set output.dir=runs/results-seeds
# H and the outer learning rate at 4 workers over seeds 0-2: the three lr 0.35 entries (9 runs,
# about 35 minutes beside the next; lr 0.2 at H = 10 stays seed 0's); its lr 0.7 column is k-and-h's.
"$narrows" run $d/outer-lr.yaml -q --set seeds=3 --set output.dir=runs/results-seeds \
  --set 'compare=[{name: h10-lr0.35, inner_steps: 10, outer_lr: 0.35}, {name: h50-lr0.35, inner_steps: 50, outer_lr: 0.35}, {name: h100-lr0.35, inner_steps: 100, outer_lr: 0.35}]'
# M = 16 over seeds 0-2, each seed a run of its own (about an hour of one core each; a seed whose
# summary holds both entries is not run again). docs/results/papers.md gives them with their mean ± 95%
# interval and the paired gap; seeds_table.py does not read these folders.
for seed in 0 1 2; do
  summary=runs/results-seeds-m16/seed-$seed/workers/summary.json
  if [ -f "$summary" ] && grep -q diloco-h50 "$summary"; then continue; fi
  "$narrows" run $d/workers.yaml -q --set workers.count=16 --set seed=$seed --set seeds=1 \
    --set output.dir=runs/results-seeds-m16/seed-$seed
done
python3 $d/seeds_table.py runs/results-seeds
