#!/usr/bin/env bash
# Reproduces docs/results/papers.md: every run, sweep and report it cites (about an hour on 2 cores;
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
"$narrows" run $d/outer-lr.yaml -q
"$narrows" sweep $d/k-and-h.yaml -q --grid workers.count=4,8
"$narrows" sweep $d/workers.yaml -q --grid workers.count=1,2,16

# The reports and the figures of docs/results/papers.md (the top of each report, drawn by headless Chromium).
r=runs/results
shot() {  # shot NAME HEIGHT REPORT_ARGS...
  local name=$1 height=$2
  shift 2
  "$narrows" report "$@" -o $r/$name.html
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,$height \
    --screenshot=$d/$name.png $r/$name.html 2>/dev/null
}
shot k4-h 760 $r/k-and-h-sweep/count-4
shot k8-h 760 $r/k-and-h-sweep/count-8
shot iid-vs-non-iid 760 $r/k-and-h-sweep/count-4 $r/non-iid --entry ddp --entry diloco-h50
shot outer-optimizer 760 $r/k-and-h-sweep/count-4 $r/outer-optimizer --entry diloco-h50 --entry sgd-lr1 --entry sgd-lr0.7 --entry adam
shot dropped 760 $r/dropped
shot pool 760 $r/k-and-h-sweep/count-4 $r/k-and-h-sweep/count-8 $r/growing $r/shrinking --entry ddp --entry diloco-h50
shot workers 900 $r/workers-sweep
shot bandwidth-h 900 $r/bandwidth-h-sweep
