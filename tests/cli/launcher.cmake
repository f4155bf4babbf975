# A launcher users already have starting the workers, as its users start a job: LAUNCHER is
#  - torchrun (Debian's python3-torch): rank, world and rendezvous from RANK, WORLD_SIZE,
#    MASTER_ADDR and MASTER_PORT;
#  - mpirun (Open MPI): rank and world from OMPI_COMM_WORLD_RANK and _SIZE, the rendezvous given
#    with -x MASTER_ADDR, as with PyTorch under mpirun.
# Either gives the same losses and bytes, step by step, as `narrows launch --local 2`, with the
# scenario's workers.count: auto (the launcher's world size). Under torchrun, a worker that dies is
# restarted with the whole group by torchrun's elastic agent, which goes on from the run's newest
# complete checkpoint to the same losses.
# Run by ctest as `cmake -P` with NARROWS, SRC, WORK and LAUNCHER set.
include(${SRC}/tests/cli/deploy_corpus.cmake)
include(${SRC}/tests/cli/deploy_common.cmake)

launch_two_workers_locally(tr 6)
# The same scenario with workers.count: auto: the launcher's world size is the scenario's; a command
# without a launcher refuses it, naming the key.
file(READ ${WORK}/tr.yaml scenario)
string(REPLACE "workers: {count: 2}" "workers: {count: auto}" scenario "${scenario}")
file(WRITE ${WORK}/launched/tr.yaml "${scenario}")
execute_process(COMMAND ${NARROWS} validate launched/tr.yaml RESULT_VARIABLE rc ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "validate of workers.count: auto exits ${rc}, not 2: ${err}")
endif()
expect_in(auto "launched/tr.yaml:9:" "${err}")
expect_in(auto "workers.count: auto takes the number of workers from a launcher" "${err}")
set(worker ${NARROWS} worker launched/tr.yaml -q --key ${WORK}/cluster.key --set output.dir=${LAUNCHER})
if(LAUNCHER STREQUAL "torchrun")
  # --standalone: torchrun's own store takes a port of its own and MASTER_PORT names a free one for
  # rank 0 (with --master_port its store would hold that port). Debian 12's torchrun (PyTorch 1.13
  # under Python 3.11) cannot parse its own default --redirects 0 (Python 3.11's flag enums no
  # longer list a zero member): a non-zero choice works around it.
  run_ok(torchrun torchrun --standalone --nproc_per_node 2 --redirects 2 --tee 2 --no_python ${worker})
elseif(LAUNCHER STREQUAL "mpirun")
  run_ok(mpirun mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29621
         ${worker})
else()
  message(FATAL_ERROR "LAUNCHER=${LAUNCHER}: expected torchrun or mpirun")
endif()
expect_same_as_local(tr ${LAUNCHER})

if(LAUNCHER STREQUAL "torchrun")
  # Elastic: worker 1's process dies at step 10 of the first entry (its crash fault, a real SIGKILL);
  # torchrun's agent (--max_restarts 1) stops the other and starts both again, and they go on from
  # the newest complete checkpoint (deploy.checkpoint_every: 1, a checkpoint a step): the same
  # losses and bytes, step by step, as the run never interrupted. Long timeouts, so that rank 0 waits
  # for the agent rather than going on alone.
  string(APPEND scenario "deploy: {checkpoint_every: 1, heartbeat_s: 0.5, timeout_s: 60, collective_timeout_s: 120}\n"
         "faults: [{type: crash, worker: 1, at_step: 10}]\n")
  file(REMOVE_RECURSE ${WORK}/elastic)
  file(WRITE ${WORK}/elastic/tr.yaml "${scenario}")
  run_ok(elastic torchrun --standalone --nproc_per_node 2 --max_restarts 1 --monitor_interval 0.2 --redirects 2 --tee 2
         --no_python ${NARROWS} worker elastic/tr.yaml -q --key ${WORK}/cluster.key --set output.dir=elastic)
  expect_in(elastic "started again by torchrun (restart 1): 0 entries finished before; ddp goes on from" "${out}")
  expect_same_as_local(tr elastic)
  file(READ ${WORK}/elastic/tr/ddp/events.jsonl events)
  expect_in(elastic_event "\"type\":\"resumed\"" "${events}")
endif()
