#!/usr/bin/env bash
# The finer learning-rate grid of docs/results/papers.md's CompleteP section: five peak learning rates a
# factor of sqrt(2) apart around the coarse grid's optima (0.0028-0.0113), two parameterisations x
# four depths x five seeds, 200 runs of completep.yaml's setting (400 steps). Each (parameterisation,
# depth, learning rate) is its own sweep over the seeds, JOBS of them at once (one thread each), the
# deepest first; then the whole grid's report, its figure (docs/results/completep/NAME.png) and
# tables (table.py: every loss a mean over the five seeds with its 95% t-interval, each claim a
# paired interval and verdict). Resumable: a finished
# seed is not run again. About four hours on 2 cores (a depth-16 run: about 5 minutes of one core).
# The points are kept in docs/results/completep/data (its .gitignore keeps each seed's summary.json
# and scenario.yaml, a few kB, and leaves out the rest), so that what is measured is committed as it
# is measured and a fresh clone resumes where the last one stopped.
# Usage: docs/results/completep/fine.sh [PATH_TO_NARROWS [JOBS [KEY=VALUE ...]]]   (from the repository root)
#   KEY=VALUE: further --set overrides for every run (device=cuda to train on a GPU, output.dir=...).
#   PARAMS (default standard,completep), NAME (default completep-fine) and LRS (default the five
#   rates below) in the environment pick the parameterisations, the sweep's name and its learning
#   rates (alpha.sh: completep at depth_alpha 0.5, its own sweep, two rates more).
set -euo pipefail
cd "$(dirname "$0")/../../.."
narrows=${1:-build/narrows}
jobs=${2:-2}
params=${PARAMS:-standard,completep}
name=${NAME:-completep-fine}
sets=(--set seeds=5 --set name="$name")
dir=docs/results/completep/data
sets+=(--set output.dir="$dir")
for s in "${@:3}"; do
  sets+=(--set "$s")
  case $s in output.dir=*) dir=${s#output.dir=} ;; esac
done
lrs=${LRS:-0.002828,0.004,0.005657,0.008,0.011314}
for depth in 16 8 4 2; do
  for param in ${params//,/ }; do
    for lr in ${lrs//,/ }; do
      while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
      "$narrows" sweep docs/results/completep/completep.yaml -q "${sets[@]}" --grid model.parameterization=$param \
        --grid model.n_layers=$depth --grid train.lr=$lr &
    done
  done
done
wait
# Every point is finished: this writes the whole grid's results.csv and report.
"$narrows" sweep docs/results/completep/completep.yaml -q "${sets[@]}" --grid model.parameterization="$params" \
  --grid model.n_layers=2,4,8,16 --grid train.lr=$lrs --report
# The figure of docs/results/papers.md (the top of the report, drawn by headless Chromium).
if command -v chromium >/dev/null; then
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,700 \
    --screenshot="docs/results/completep/$name.png" "$dir/$name-sweep/report.html" 2>/dev/null || true
fi
sweeps=("$dir/completep-fine-sweep")
[ "$name" = completep-fine ] || sweeps+=("$dir/$name-sweep")
python3 docs/results/completep/table.py "${sweeps[@]}"
