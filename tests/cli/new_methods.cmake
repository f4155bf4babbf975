# Hierarchical DiLoCo (two islands of two processes), SPARTA, SPARTA beside DiLoCo and DeMo run by
# four real processes (launch --local 4) to the emulator's losses, validation losses and bytes,
# step by step; and each, resumed from its step-16 checkpoint, continues exactly as the
# uninterrupted run (DeMo's momenta, SPARTA-DiLoCo's global parameters and outer momentum, the
# inner optimisers' states are in the checkpoint; SPARTA's subsets follow from the step).
# Run by ctest as `cmake -P` with NARROWS, SRC and WORK set.
include(${SRC}/tests/cli/deploy_corpus.cmake)
include(${SRC}/tests/cli/deploy_common.cmake)

file(WRITE ${WORK}/methods.yaml "name: methods\nseed: 1\nthreads: 1\nmodel: {preset: nano, seq_len: 32}\n"
     "data: {path: corpus.txt}\ntrain: {steps: 24, batch_size: 4, warmup_steps: 2}\n"
     "eval: {every: 4, batches: 2, batch_size: 4}\ncompute: {mode: modelled, device_flops: 1e10}\n"
     "workers: {count: 4}\n"
     "network: {topology: islands, islands: [[0, 1], [2, 3]], profile: internet-1g, intra: {profile: dc-100g}}\n"
     "output: {dir: runs, log_every: 1}\ndeploy: {security: plain, checkpoint_every: 1}\n"
     "compare: [{algorithm: diloco, inner_steps: 4, inner: ddp, collective: hierarchical}, "
     "{algorithm: sparta, share: 0.01}, {algorithm: sparta, share: 0.01, inner_steps: 4}, demo]\n")
run_ok(emulated ${NARROWS} run methods.yaml -q -o runs/emulated)
run_ok(launched ${NARROWS} launch --local 4 methods.yaml -q -o runs/launched)
foreach(entry hierarchical-diloco-h4 sparta sparta-diloco-h4 demo)
  expect_same_metrics(${entry} ${WORK}/runs/emulated/${entry}/metrics.jsonl ${WORK}/runs/launched/${entry}/metrics.jsonl 0)
  file(COPY_FILE ${WORK}/runs/launched/${entry}/metrics.jsonl ${WORK}/uninterrupted-${entry}.jsonl)
  run_ok(resumed_${entry} ${NARROWS} launch --local 4 methods.yaml -q -o runs/launched --entry ${entry}
         --resume runs/launched/${entry}/checkpoints/step-000016)
  expect_same_metrics(resume_${entry} ${WORK}/uninterrupted-${entry}.jsonl ${WORK}/runs/launched/${entry}/metrics.jsonl 0)
endforeach()
