#!/usr/bin/env bash
# CompleteP's depth exponent: α = 0.5 (the depth-μP of Yang et al.) beside α = 1 (CompleteP) on the
# fine grid of fine.sh (five peak learning rates a factor of sqrt(2) apart, 0.0028-0.0113; depths
# 2, 4, 8, 16; seeds 0-4): 100 runs of completep.yaml's setting with model.depth_alpha: 0.5, by
# fine.sh as its own sweep (completep-alpha). The α = 1 and standard points are fine.sh's; its
# table.py reads both sweeps and pairs them by seed (the α of a point is read from its
# scenario.yaml). Resumable: a finished seed is not run again. About two hours on 2 cores (an estimate from
# the fine grid's per-run times, not a timed run, so it carries no interval; the grid's losses get
# theirs over the seeds, in table.py).
# Usage: docs/results/completep/alpha.sh [PATH_TO_NARROWS [JOBS [KEY=VALUE ...]]]   (from the repository root)
#   KEY=VALUE: further --set overrides for every run (device=cuda, output.dir=...).
set -euo pipefail
here=$(dirname "$0")
# The parameterisation is set before α: the sweep checks its --set overrides on the scenario
# before its --grid axes, and completep.yaml's own parameterisation is the standard one.
PARAMS=completep NAME=completep-alpha exec "$here/fine.sh" "${1:-build/narrows}" "${2:-2}" model.parameterization=completep \
  model.depth_alpha=0.5 "${@:3}"
