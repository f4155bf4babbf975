# A short storm: `narrows launch --local 4 --chaos` SIGKILLs workers of a DiLoCo run at seeded
# random times (once a worker restarted a moment before, while it joins) and starts each again with
# --rejoin; the run finishes, the restarted workers are welcomed back, and all four are in the last
# outer step. Run by ctest as `cmake -P` with NARROWS, SRC and WORK set.
include(${SRC}/tests/cli/deploy_corpus.cmake)
file(WRITE ${WORK}/chaos.yaml "name: chaos\nseed: 3\nthreads: 1\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
     "train: {steps: 4000, batch_size: 4, warmup_steps: 4}\neval: {every: 100, batches: 2, batch_size: 4}\n"
     "workers: {count: 4}\noutput: {dir: out, log_every: 50}\n"
     "deploy: {security: plain, heartbeat_s: 0.1, timeout_s: 1.0, collective_timeout_s: 30}\n"
     "compare: [{algorithm: diloco, inner_steps: 10, name: dl}]\n")
execute_process(COMMAND ${NARROWS} launch --local 4 chaos.yaml -q
                        --chaos "{seed: 3, kills: 4, mean_interval_s: 2.5, restart_after_s: 0.5, from_s: 1.5, until_s: 10}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 240)
set(events "")
if(EXISTS ${WORK}/out/chaos/dl/events.jsonl)
  file(READ ${WORK}/out/chaos/dl/events.jsonl events)
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "chaos: exit ${rc}; events:\n${events}\n${out}${err}")
endif()
file(STRINGS ${WORK}/out/chaos/chaos.jsonl kills REGEX "chaos_kill")
file(STRINGS ${WORK}/out/chaos/chaos.jsonl restarts REGEX "chaos_restart\"")
list(LENGTH kills nkills)
list(LENGTH restarts nrestarts)
if(NOT nkills EQUAL 4 OR NOT nrestarts EQUAL 4)
  message(FATAL_ERROR "chaos: ${nkills} kills and ${nrestarts} restarts, expected 4 and 4:\n${events}")
endif()
# The launcher's events are in the entry's too; the survivors saw crashes and welcomed joiners back.
foreach(expected "\"type\":\"chaos_kill\"" "\"type\":\"crash\"" "\"type\":\"join\""
        "\"participants\":[0,1,2,3],\"step\":4000")
  string(FIND "${events}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "chaos: events lack ${expected}:\n${events}\n${out}${err}")
  endif()
endforeach()
# Cuts need the link emulator.
execute_process(COMMAND ${NARROWS} launch --local 4 chaos.yaml -q --chaos "{partitions: 1}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 60)
string(FIND "${err}" "partitions cut links in the link emulator: add --network" at)
if(NOT rc EQUAL 2 OR at EQUAL -1)
  message(FATAL_ERROR "chaos partitions without --network: exit ${rc}\n${out}${err}")
endif()
# A bad spec is refused before anything starts.
execute_process(COMMAND ${NARROWS} launch --local 4 chaos.yaml -q --chaos "{kills: 3, typo: 1}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 60)
string(FIND "${err}" "--chaos: unknown key 'typo'" at)
if(NOT rc EQUAL 2 OR at EQUAL -1)
  message(FATAL_ERROR "chaos with a bad spec: exit ${rc}\n${out}${err}")
endif()
