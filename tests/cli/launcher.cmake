# A launcher users already have starting the workers, as its users start a job: LAUNCHER is
#  - torchrun (Debian's python3-torch): rank, world and rendezvous from RANK, WORLD_SIZE,
#    MASTER_ADDR and MASTER_PORT;
#  - mpirun (Open MPI): rank and world from OMPI_COMM_WORLD_RANK and _SIZE, the rendezvous given
#    with -x MASTER_ADDR, as with PyTorch under mpirun.
# Either gives the same losses and bytes, step by step, as `narrows launch --local 2`.
# Run by ctest as `cmake -P` with NARROWS, SRC, WORK and LAUNCHER set.
include(${SRC}/tests/cli/deploy_corpus.cmake)
include(${SRC}/tests/cli/deploy_common.cmake)

launch_two_workers_locally(tr 6)
set(worker ${NARROWS} worker tr.yaml -q --key ${WORK}/cluster.key --set output.dir=${LAUNCHER})
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
