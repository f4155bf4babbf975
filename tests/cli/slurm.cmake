# A real Slurm launching the workers: tools/slurm-up's single-node cluster (munged, slurmctld,
# slurmd), `srun -n 2 narrows worker` with rank and world from SLURM_PROCID and SLURM_NTASKS and the
# rendezvous on the first node of the step's node list (no MASTER_ADDR): the same losses, step by
# step, as `narrows launch --local 2`. Skipped, with the reason, where the cluster cannot start
# (not root, Slurm not installed). Run by ctest as `cmake -P` with NARROWS, SRC and WORK set.
include(${SRC}/tests/cli/deploy_corpus.cmake)
include(${SRC}/tests/cli/deploy_common.cmake)

set(cluster ${WORK}/cluster)
execute_process(COMMAND ${SRC}/tools/slurm-up ${cluster} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 3)
  message(STATUS "${err}")  # "slurm-up: cannot start a cluster here: ..." marks the test skipped
  return()
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "tools/slurm-up: exit ${rc}\n${out}${err}")
endif()
set(ENV{SLURM_CONF} ${cluster}/slurm.conf)

string(CONCAT scenario "name: sl\nseed: 5\nthreads: 1\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
       "train: {steps: 16, batch_size: 4, warmup_steps: 2}\neval: {every: 8, batches: 2, batch_size: 4}\n"
       "compute: {mode: modelled, device_flops: 1e9}\nworkers: {count: 2}\noutput: {dir: local, log_every: 1}\n"
       "compare: [ddp, diloco-h4]\n")
file(WRITE ${WORK}/sl.yaml "${scenario}")
run_ok(local ${NARROWS} launch --local 2 sl.yaml -q)
run_ok(keygen ${NARROWS} keygen ${WORK}/cluster.key)
# A port of this test's own, so that a run beside it on 29500 does not collide.
set(ENV{MASTER_PORT} 29617)
unset(ENV{MASTER_ADDR})
run_ok(srun srun -n 2 --kill-on-bad-exit=1 --time=5 ${NARROWS} worker sl.yaml -q --key ${WORK}/cluster.key
       --set output.dir=slurm)
foreach(entry ddp diloco-h4)
  expect_same_metrics(slurm_${entry} ${WORK}/local/sl/${entry}/metrics.jsonl ${WORK}/slurm/sl/${entry}/metrics.jsonl 0
                      train_loss bytes_sent)
endforeach()
file(READ ${WORK}/slurm/sl/summary.json summary)
string(JSON workers GET "${summary}" results 0 workers)
if(NOT workers EQUAL 2)
  message(FATAL_ERROR "srun's run has ${workers} workers, not 2:\n${summary}")
endif()
execute_process(COMMAND ${SRC}/tools/slurm-down ${cluster} OUTPUT_QUIET)
