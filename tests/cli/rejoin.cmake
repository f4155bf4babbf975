# A restarted worker rejoins a DiLoCo run at the next outer step: workers started by hand, as on a
# cluster; rank 2 is killed by its crash fault at step 20 and started again at once with --rejoin,
# usually before the survivors' heartbeats have declared its first process dead. Its own test so
# that it can be repeated (`ctest -R cli_rejoin --repeat until-fail:50`).
# Run by ctest as `cmake -P` with NARROWS, SRC and WORK set.
include(${SRC}/tests/cli/deploy_corpus.cmake)

# Two crashes of rank 2, each restarted at once: (1) between steps, just after the outer step's
# all-reduce; (2) inside that all-reduce, after 3 of its 4 messages (a ring of 3 sends 2(n-1); the
# nano model's pieces are below the 1 MiB a live ring splits them at), hung for 0.5 s first: rank 1
# has completed the all-reduce and trains on, while rank 0, which waits for the 4th, fails it. The
# survivors must settle alike (rank 0 takes rank 1's result: a "settled" event) rather than wait on
# each other at different steps until collective_timeout_s.
function(rejoin_case name preset crash)
  file(WRITE ${WORK}/${name}.yaml "name: ${name}\nseed: 3\nthreads: 1\nmodel: {preset: ${preset}}\ndata: {path: corpus.txt}\n"
       "train: {steps: 100, batch_size: 4, warmup_steps: 4}\neval: {every: 8, batches: 2, batch_size: 4}\n"
       "compute: {mode: modelled, device_flops: 1e9}\nworkers: {count: 3}\noutput: {dir: out, log_every: 10}\n"
       "deploy: {security: plain, heartbeat_s: 0.1, timeout_s: 2.0, collective_timeout_s: 60}\n"
       "faults: [${crash}]\ncompare: [{algorithm: diloco, inner_steps: 20, name: dl}]\n")
  string(RANDOM LENGTH 4 ALPHABET 123456789 port_offset)
  math(EXPR port "20000 + ${port_offset} % 20000")
  set(worker ${NARROWS} worker ${name}.yaml --world 3 --master 127.0.0.1:${port} --bind 127.0.0.1 -q)
  # (One pipeline runs them side by side; rank 0, the only one that prints, comes last. Rank 2 is
  # restarted as soon as its crash fault has killed it, however slow the machine.)
  execute_process(COMMAND ${worker} --rank 1
                  COMMAND sh -c "\"$@\" --rank 2; exec \"$@\" --rank 2 --rejoin --entry dl" sh ${worker}
                  COMMAND ${worker} --rank 0
                  RESULTS_VARIABLE rcs OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 240)
  set(events "")
  if(EXISTS ${WORK}/out/${name}/dl/events.jsonl)
    file(READ ${WORK}/out/${name}/dl/events.jsonl events)
  endif()
  if(NOT rcs STREQUAL "0;0;0")
    message(FATAL_ERROR "${name}: exits ${rcs} (ranks 1, 2 restarted, 0); events:\n${events}\n${out}${err}")
  endif()
  foreach(expected "\"type\":\"crash\"" "\"type\":\"join\",\"workers\":[2]" "\"participants\":[0,1,2],\"step\":100" ${ARGN})
    string(FIND "${events}" "${expected}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${name}: events lack ${expected}:\n${events}\n${out}${err}")
    endif()
  endforeach()
endfunction()

rejoin_case(between tiny "{type: crash, worker: 2, at_step: 20}")
rejoin_case(inside nano "{type: crash, worker: 2, at_step: 20, after_sends: 3, stall_s: 0.5}" "\"type\":\"settled\",\"worker\":0")
