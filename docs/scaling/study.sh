#!/usr/bin/env bash
# The scaling study of docs/results/scaling.md: DDP and DiLoCo (H = 16 and 64) over four model sizes
# (37.8 k to 842 k parameters, 22x) at 1, 2 and 4 workers, every size at the same tokens per
# parameter with a fixed global batch (16 sequences of 128 bytes, 16 / M per worker). Each (size,
# workers) point is a `narrows tune`: the inner learning rate on a coarse grid for every entry, the
# outer learning rate for each DiLoCo (so per size, workers and H), one tuning seed, then every
# entry at its chosen values on seeds 0 and 1. Then the batch piece: the two smallest sizes at a
# 4x global batch, 2 workers, at the tuned values. Then the tables and fits.
#
# Resumable: a finished run is not run again, so the script can be stopped and started; points run
# smallest first, so the fits of the small sizes come first. Budget on 2 cores: about 7 hours at
# TOKENS_PER_PARAM=10 (cost grows as N^2 x tokens per parameter: the largest size is 3/4 of it).
# Usage: docs/scaling/study.sh [PATH_TO_NARROWS] [TOKENS_PER_PARAM] [SIZES]   (from the repo root)
#   SIZES: a subset of "37k 125k 373k 842k" (default: all four)
set -euo pipefail
cd "$(dirname "$0")/../.."
narrows=${1:-build/narrows}
ratio=${2:-10}
sizes=${3:-"37k 125k 373k 842k"}
out=${SCALING_OUT:-runs/scaling}   # where the tune folders go
batch=16      # global batch, sequences
seq_len=128
declare -A shape=([37k]="32 2 2" [125k]="64 2 2" [373k]="96 3 3" [842k]="128 4 4")
declare -A params=([37k]=37760 [125k]=124672 [373k]=372576 [842k]=842496)

for size in $sizes; do
  read -r d layers heads <<<"${shape[$size]}"
  n=${params[$size]}
  steps=$(( (ratio * n + batch * seq_len - 1) / (batch * seq_len) ))
  warmup=$(( steps / 10 ))
  for m in 1 2 4; do
    echo "study: N=$n ($size), M=$m: $steps steps of $batch sequences"
    "$narrows" tune scenarios/scaling.yaml -q --seeds 2 --tuning-seeds 1 \
      --set name="n$size-m$m" --set output.dir=$out \
      --set model.d_model="$d" --set model.n_layers="$layers" --set model.n_heads="$heads" \
      --set workers.count=$m --set train.batch_size=$((batch / m)) \
      --set train.steps=$steps --set train.warmup_steps=$warmup \
      --grid train.lr=1.5e-3,3e-3,6e-3 --grid compare.1.outer_lr=0.4,0.8 --grid compare.2.outer_lr=0.4,0.8
  done
done
# The batch piece: 4x the global batch (64 sequences) at 2 workers, a quarter of the steps, the
# same tokens; tuned the same way (its own folder, so that the fits see one batch size).
for size in 37k 125k; do
  case " $sizes " in *" $size "*) ;; *) continue ;; esac
  read -r d layers heads <<<"${shape[$size]}"
  n=${params[$size]}
  steps=$(( (ratio * n + 4 * batch * seq_len - 1) / (4 * batch * seq_len) ))
  echo "study: N=$n ($size), M=2, global batch $((4 * batch)): $steps steps"
  "$narrows" tune scenarios/scaling.yaml -q --seeds 2 --tuning-seeds 1 \
    --set name="n$size-m2" --set output.dir=$out-batch64 \
    --set model.d_model="$d" --set model.n_layers="$layers" --set model.n_heads="$heads" \
    --set workers.count=2 --set train.batch_size=$((4 * batch / 2)) \
    --set train.steps=$steps --set train.warmup_steps=$((steps / 10)) \
    --grid train.lr=1.5e-3,3e-3,6e-3 --grid compare.1.outer_lr=0.4,0.8 --grid compare.2.outer_lr=0.4,0.8
done
python3 docs/scaling/table.py $out $out-batch64
