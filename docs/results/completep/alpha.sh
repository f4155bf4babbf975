#!/usr/bin/env bash
# CompleteP's depth exponent: α = 0.5 (the depth-μP of Yang et al.) beside α = 1 (CompleteP) on the
# fine grid of fine.sh (five peak learning rates a factor of sqrt(2) apart, 0.0028-0.0113; depths
# 2, 4, 8, 16; seeds 0-4): 100 runs of completep.yaml's setting with model.depth_alpha: 0.5, each
# (depth, learning rate) its own sweep over the seeds, JOBS at once, the deepest first. The α = 1
# and standard points are fine.sh's; table.py reads both sweeps and pairs them by seed (the α of a
# point is read from its scenario.yaml). Resumable: a finished seed is not run again. About two
# hours on 2 cores.
# Usage: docs/results/completep/alpha.sh [PATH_TO_NARROWS [JOBS [KEY=VALUE ...]]]   (from the repository root)
#   KEY=VALUE: further --set overrides for every run (device=cuda, output.dir=...).
set -euo pipefail
cd "$(dirname "$0")/../../.."
narrows=${1:-build/narrows}
jobs=${2:-2}
sets=(--set seeds=5 --set name=completep-alpha --set model.depth_alpha=0.5)
dir=runs/completep
for s in "${@:3}"; do
  sets+=(--set "$s")
  case $s in output.dir=*) dir=${s#output.dir=} ;; esac
done
lrs=0.002828,0.004,0.005657,0.008,0.011314
for depth in 16 8 4 2; do
  for lr in ${lrs//,/ }; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    "$narrows" sweep docs/results/completep/completep.yaml -q "${sets[@]}" --grid model.parameterization=completep \
      --grid model.n_layers=$depth --grid train.lr=$lr &
  done
done
wait
"$narrows" sweep docs/results/completep/completep.yaml -q "${sets[@]}" --grid model.parameterization=completep \
  --grid model.n_layers=2,4,8,16 --grid train.lr=$lrs --report
python3 docs/results/completep/table.py "$dir/completep-fine-sweep" "$dir/completep-alpha-sweep"
