# A real Slurm launching the workers: tools/slurm-up's single-node cluster (munged, slurmctld,
# slurmd), `srun -n 2 narrows worker` with rank and world from SLURM_PROCID and SLURM_NTASKS and the
# rendezvous on the first node of the step's node list (no MASTER_ADDR): the same losses, step by
# step, as `narrows launch --local 2`. Skipped, with the reason, where the cluster cannot start
# (not root, Slurm not installed). Then a rank killed (its crash fault, a real SIGKILL) while the
# others run on (`srun --kill-on-bad-exit=0`) comes back as a new step of its own (`srun -n 1 narrows
# worker --rank 2 --world 3 --rejoin`) and the run completes with it. Last, `narrows sweep --slurm`
# submits a grid as job arrays, a cancelled point is submitted again, and --gather's table equals
# the same sweep's run here.
# Run by ctest as `cmake -P` with NARROWS, SRC and WORK set.
# A cluster an earlier run of this test left up (it failed before its end) is stopped before its
# folder is emptied, so that its daemons do not hold the ports.
if(EXISTS ${WORK}/cluster/slurmctld.pid)
  execute_process(COMMAND ${SRC}/tools/slurm-down ${WORK}/cluster OUTPUT_QUIET ERROR_QUIET)
endif()
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

launch_two_workers_locally(sl 5)
# A port of this test's own, so that a run beside it on 29500 does not collide.
set(ENV{MASTER_PORT} 29617)
unset(ENV{MASTER_ADDR})
run_ok(srun srun -n 2 --kill-on-bad-exit=1 --time=5 ${NARROWS} worker sl.yaml -q --key ${WORK}/cluster.key
       --set output.dir=slurm)
expect_same_as_local(sl slurm)
file(READ ${WORK}/slurm/sl/summary.json summary)
string(JSON workers GET "${summary}" results 0 workers)
if(NOT workers EQUAL 2)
  message(FATAL_ERROR "srun's run has ${workers} workers, not 2:\n${summary}")
endif()

# The rejoin: rank 2's process dies at step 20; a watcher starts it again as a step of its own as
# soon as fewer than three workers run.
file(WRITE ${WORK}/rj.yaml "name: rj\nseed: 3\nthreads: 1\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
     "train: {steps: 60, batch_size: 4, warmup_steps: 4}\neval: {every: 20, batches: 2, batch_size: 4}\n"
     "compute: {mode: modelled, device_flops: 1e9}\nworkers: {count: 3}\noutput: {dir: slurm, log_every: 10}\n"
     "deploy: {security: plain, heartbeat_s: 0.1, timeout_s: 2.0, collective_timeout_s: 60}\n"
     "faults: [{type: crash, worker: 2, at_step: 20}]\ncompare: [{algorithm: diloco, inner_steps: 20, name: dl}]\n")
set(ENV{MASTER_PORT} 29623)
execute_process(
  COMMAND srun -n 3 --kill-on-bad-exit=0 --time=5 ${NARROWS} worker rj.yaml -q
  COMMAND sh -c "count() { pgrep -fc \"^$0 worker rj.yaml\"; }
                 until [ \"$(count)\" -ge 3 ]; do sleep 0.1; done
                 while [ \"$(count)\" -ge 3 ]; do sleep 0.05; done
                 exec srun -n 1 --time=5 \"$0\" worker rj.yaml -q --rank 2 --world 3 --rejoin --entry dl" ${NARROWS}
  RESULTS_VARIABLE rcs OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 240)
set(events "")
if(EXISTS ${WORK}/slurm/rj/dl/events.jsonl)
  file(READ ${WORK}/slurm/rj/dl/events.jsonl events)
endif()
# The three-task step ends in failure (one of its tasks was killed); the restarted rank's succeeds.
list(GET rcs 1 rejoined)
if(NOT rejoined EQUAL 0)
  message(FATAL_ERROR "the restarted rank's step: exits ${rcs}; events:\n${events}\n${out}${err}")
endif()
foreach(expected "\"type\":\"crash\"" "\"type\":\"join\",\"workers\":[2]" "\"participants\":[0,1,2],\"step\":60")
  string(FIND "${events}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "rejoin under srun: events lack ${expected}:\n${events}\n${out}${err}")
  endif()
endforeach()

# sweep --slurm: a 2 x 2 grid as job arrays (the points that train, then those timed with their
# losses, after them), held so that one task can be cancelled before it runs, as a preempted or
# failed point would end; --gather waits and names it; --slurm again submits it alone; --gather
# then writes the table, equal to the same sweep run on this machine.
file(WRITE ${WORK}/sw.yaml "name: sw\nseed: 1\nthreads: 1\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
     "train: {steps: 6, batch_size: 4, warmup_steps: 2}\neval: {every: 6, batches: 1, batch_size: 4}\n"
     "compute: {mode: modelled, device_flops: 1e9}\nworkers: {count: 2}\noutput: {dir: sweeps}\n"
     "compare: [ddp, diloco-h2]\n")
set(grid sw.yaml -q --grid train.lr=0.001,0.002 --grid network.profile=home-100m,dc-100g -o sweeps/sw)
run_ok(submit ${NARROWS} sweep ${grid} --slurm --time=5 --sbatch-arg=--hold)
expect_in(submit "submitted to Slurm as job" "${out}")
file(READ ${WORK}/sweeps/sw/slurm.json state)
string(JSON timed_job GET "${state}" jobs 1 id)
string(JSON trained_job GET "${state}" jobs 0 id)
# Point 1 (lr 0.001 on dc-100g) is timed with point 0's losses: cancelled before it runs.
run_ok(cancel scancel ${timed_job}_1)
run_ok(release scontrol release ${trained_job},${timed_job})
execute_process(COMMAND ${NARROWS} sweep ${grid} --gather RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                WORKING_DIRECTORY ${WORK} TIMEOUT 240)
if(rc EQUAL 0)
  message(FATAL_ERROR "--gather with a cancelled point exits 0:\n${out}${err}")
endif()
expect_in(gather "1 of 4 points did not finish in Slurm" "${err}")
expect_in(gather "lr-0.001_profile-dc-100g" "${err}")
expect_in(gather "its task never started" "${err}")
run_ok(resubmit ${NARROWS} sweep ${grid} --slurm --time=5)
expect_in(resubmit "3 finished, 1 submitted again" "${out}")
run_ok(gather ${NARROWS} sweep ${grid} --gather)
expect_in(gather "sweep results: sweeps/sw/results.csv" "${out}")
# Another grid for the same folder: refused before anything there changes (the tasks name points by
# their place in the grid).
execute_process(COMMAND ${NARROWS} sweep sw.yaml -q --grid train.lr=0.001,0.003 --grid network.profile=home-100m,dc-100g
                -o sweeps/sw --gather RESULT_VARIABLE rc ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "--gather with another grid: exit ${rc}, not 2: ${err}")
endif()
expect_in(other_grid "its points were submitted to Slurm with --grid train.lr=0.001,0.002" "${err}")
file(READ ${WORK}/sweeps/sw/sweep.json layout)
expect_in(other_grid_layout "0.002" "${layout}")
run_ok(here ${NARROWS} sweep sw.yaml -q --grid train.lr=0.001,0.002 --grid network.profile=home-100m,dc-100g -o sweeps/here)
file(READ ${WORK}/sweeps/sw/results.csv on_slurm)
file(READ ${WORK}/sweeps/here/results.csv on_this_machine)
if(NOT on_slurm STREQUAL on_this_machine)
  message(FATAL_ERROR "the sweep run by Slurm differs from the one run here:\n${on_slurm}\n---\n${on_this_machine}")
endif()
execute_process(COMMAND ${SRC}/tools/slurm-down ${cluster} OUTPUT_QUIET)
