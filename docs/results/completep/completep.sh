#!/usr/bin/env bash
# The learning-rate sweep of docs/results.md's CompleteP section (about an hour on one core;
# modelled compute and one thread, so every loss is identical run to run), then its report.
# Usage: docs/results/completep/completep.sh [PATH_TO_NARROWS]   (from the repository root)
set -euo pipefail
cd "$(dirname "$0")/../../.."
narrows=${1:-build/narrows}
"$narrows" sweep docs/results/completep/completep.yaml -q --grid model.parameterization=standard,completep \
  --grid model.n_layers=2,4,8,16 --grid train.lr=0.001,0.002,0.004,0.008,0.016,0.032 --report
# The figure of docs/results.md (the top of the report, drawn by headless Chromium).
if command -v chromium >/dev/null; then
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,700 \
    --screenshot=docs/results/completep/completep.png runs/completep/completep-sweep/report.html 2>/dev/null
fi
