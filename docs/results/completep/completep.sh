#!/usr/bin/env bash
# The learning-rate sweep of docs/results/papers.md's CompleteP section over seeds 0-2: two
# parameterisations x four depths x five peak learning rates x three seeds, 120 runs (76 minutes
# on 2 cores, timed once with other work beside it, so no interval: the two parameterisations run
# at once, one core each; modelled compute and one thread per run, so every loss is the same run
# to run, and the losses' intervals are over the seeds, in table.py). Then its report, figure and tables.
# Resumable: a finished point is not run again.
# Usage: docs/results/completep/completep.sh [PATH_TO_NARROWS]   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../../.."
narrows=${1:-build/narrows}
grid=(--grid model.n_layers=2,4,8,16 --grid train.lr=0.001,0.002,0.004,0.008,0.016)
"$narrows" sweep docs/results/completep/completep.yaml -q --set seeds=3 --grid model.parameterization=standard "${grid[@]}" &
"$narrows" sweep docs/results/completep/completep.yaml -q --set seeds=3 --grid model.parameterization=completep "${grid[@]}"
wait
# Both halves are finished points of the whole sweep: this writes its results.csv and report.
"$narrows" sweep docs/results/completep/completep.yaml -q --set seeds=3 --grid model.parameterization=standard,completep \
  "${grid[@]}" --report
# The figure of docs/results/papers.md (the top of the report, drawn by headless Chromium).
if command -v chromium >/dev/null; then
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,700 \
    --screenshot=docs/results/completep/completep.png runs/completep/completep-sweep/report.html 2>/dev/null
fi
python3 docs/results/completep/table.py runs/completep/completep-sweep
