#!/usr/bin/env bash
# Reproduces the ablation of docs/results/algorithms.md: scenarios/streaming.yaml over two networks and 4
# and 8 workers, every point on seeds 0-2, then its tables. Resumable: a finished seed of a point
# is not run again, so the script can be stopped and started (about 25 minutes per point and seed
# on 2 cores; 12 point-seeds). Modelled compute: the losses and times are the same on every run.
# Usage: docs/algorithms/reproduce.sh [PATH_TO_NARROWS]   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../.."
narrows=${1:-build/narrows}
"$narrows" sweep scenarios/streaming.yaml -q --set seeds=3 \
  --grid network.profile=internet-1g,home-100m --grid workers.count=4,8
python3 docs/algorithms/table.py runs/streaming-sweep
