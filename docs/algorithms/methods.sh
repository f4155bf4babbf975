#!/usr/bin/env bash
# Measures the 2025-26 methods of docs/results/algorithms.md: scenarios/sparseloco.yaml, eager.yaml,
# gossip.yaml and muon.yaml (Muon and AdamW inner steps) over home-100m and internet-1g, every point
# on seeds 0-2, then their tables. Resumable: a finished seed of a point is not run again (about 5
# minutes per point and seed on 2 cores; 30 point-seeds). Modelled compute: the losses are the same
# on both networks, the times are each network's.
# Usage: docs/algorithms/methods.sh [PATH_TO_NARROWS]   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
narrows=${1:-build/narrows}
networks="network.profile=home-100m,internet-1g"
for s in sparseloco eager gossip; do
  "$narrows" sweep "scenarios/$s.yaml" -q --set seeds=3 --grid "$networks"
done
"$narrows" sweep scenarios/muon.yaml -q --set seeds=3 --grid "$networks" --grid train.optimizer=muon,adamw
for s in sparseloco eager gossip muon; do
  python3 docs/algorithms/table.py "runs/$s-sweep"
done
