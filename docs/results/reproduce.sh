#!/usr/bin/env bash
# Reproduces docs/results.md: every run, sweep and report it cites (about an hour on 2 cores;
# the runs use one thread each, modelled compute, so losses and times are identical every time).
# Usage: docs/results/reproduce.sh [PATH_TO_NARROWS]   (from the repository root; default build/narrows)
set -euo pipefail
cd "$(dirname "$0")/../.."
narrows=${1:-build/narrows}
d=docs/results
"$narrows" sweep $d/bandwidth-h.yaml -q --grid network.profile=dc-100g,region-10g,internet-1g,home-100m
"$narrows" run $d/non-iid.yaml -q
"$narrows" run $d/outer-optimizer.yaml -q
"$narrows" run $d/dropped.yaml -q
"$narrows" run $d/growing.yaml -q
"$narrows" run $d/shrinking.yaml -q
"$narrows" sweep $d/k-and-h.yaml -q --grid workers.count=4,8
"$narrows" sweep $d/workers.yaml -q --grid workers.count=1,2,16
