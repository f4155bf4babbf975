#!/usr/bin/env bash
# CompleteP's depth exponent: α = 0.5 (the depth-μP of Yang et al.) beside α = 1 (CompleteP) on the
# fine grid of fine.sh (peak learning rates a factor of sqrt(2) apart; depths 2, 4, 8, 16; seeds
# 0-4) with two rates more on top, 0.016 and 0.0226, because α = 0.5's optimum at depths 8 and 16
# lies at or above the fine grid's top (0.0113): 140 runs of completep.yaml's setting with
# model.depth_alpha: 0.5, by fine.sh as its own sweep (completep-alpha). The α = 1 and standard
# points are fine.sh's; its table.py reads both sweeps and pairs them by seed (the α of a point is
# read from its scenario.yaml; a point's optimum is read from all of its own rates). Resumable: a
# finished seed is not run again. About three hours on 2 cores (an estimate from the runs' own
# times, which were measured beside other work, so it carries no interval; the grid's losses get
# theirs over the seeds, in table.py).
# Usage: docs/results/completep/alpha.sh [PATH_TO_NARROWS [JOBS [KEY=VALUE ...]]]   (from the repository root)
#   KEY=VALUE: further --set overrides for every run (device=cuda, output.dir=...).
set -euo pipefail
here=$(dirname "$0")
# The parameterisation is set before α: the sweep checks its --set overrides on the scenario
# before its --grid axes, and completep.yaml's own parameterisation is the standard one.
LRS=0.002828,0.004,0.005657,0.008,0.011314,0.016,0.022627 PARAMS=completep NAME=completep-alpha \
  exec "$here/fine.sh" "${1:-build/narrows}" "${2:-2}" model.parameterization=completep model.depth_alpha=0.5 "${@:3}"
