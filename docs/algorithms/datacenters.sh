#!/usr/bin/env bash
# Measures hierarchical DiLoCo, DeMo and SPARTA (docs/results/algorithms.md, "Across datacenters and
# the internet") on scenarios/decentralized.yaml and scenarios/multi_datacenter.yaml, one thread a
# run (the machine's two cores each ran one of the two studies side by side).
# 1. Tuning: each entry's train.lr on seed 1000 over a grid that brackets it (`narrows tune`, whose
#    tuning points are the records' tuning.json). The measurement stopped each tune once the entries
#    it compares had been tuned (run to its end each takes several hours on 2 cores): decentralized after
#    DDP, DiLoCo, DeMo and SPARTA; multi_datacenter after DDP, DiLoCo and hierarchical DiLoCo. Every
#    one of them chose 3e-3, the scenarios' own rate.
# 2. The comparison on seeds 0-2 at that rate, the untuned entries left out.
# 3. The records (docs/results/datacenters/, what the tables need, nothing per step) and the tables,
#    printed from the records alone.
# Resumable: a finished tuning point or seed is reused. Usage, from the repository root:
#   docs/algorithms/datacenters.sh [PATH_TO_NARROWS]
set -euo pipefail
cd "$(dirname "$0")/../.."
narrows=${1:-build/narrows}
one=(-q --set threads=1)
# 1. (interrupt each once the entries above are tuned, or let it run on)
"$narrows" tune scenarios/decentralized.yaml "${one[@]}" --tuning-seeds 1 --seeds 3 \
  --grid train.lr=3e-4,1e-3,3e-3,1e-2 -o runs/decentralized-tune || true
"$narrows" tune scenarios/multi_datacenter.yaml "${one[@]}" --tuning-seeds 1 --seeds 3 \
  --grid train.lr=1e-3,3e-3,1e-2 -o runs/multi_datacenter-tune || true
# 2.
for seed in 0 1 2; do  # one run a seed, so that they can run side by side
  "$narrows" run scenarios/decentralized.yaml "${one[@]}" --set train.lr=3e-3 --set seed=$seed \
    --set 'compare=[ddp, diloco-h48, demo, sparta, noloco-h48]' -o runs/decentralized-seed$seed
done
"$narrows" run scenarios/multi_datacenter.yaml "${one[@]}" --set train.lr=3e-3 --seeds 3 \
  --set 'compare=[ddp, {algorithm: diloco, name: diloco-h48, inner_steps: 48}, {algorithm: diloco, name: hierarchical-diloco-h48, inner_steps: 48, inner: ddp, collective: hierarchical}]' \
  -o runs/multi_datacenter-seeds
# 3.
table=docs/algorithms/datacenters_table.py
python3 $table collect docs/results/datacenters/decentralized runs/decentralized-tune \
  runs/decentralized-seed0 runs/decentralized-seed1 runs/decentralized-seed2
python3 $table collect docs/results/datacenters/multi_datacenter runs/multi_datacenter-tune runs/multi_datacenter-seeds
python3 $table print docs/results/datacenters/decentralized
python3 $table print docs/results/datacenters/multi_datacenter hierarchical-diloco-h48:diloco-h48
