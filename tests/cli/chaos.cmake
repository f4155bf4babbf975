# A short storm: `narrows launch --local 4 --chaos` SIGKILLs workers of a DiLoCo run at seeded
# random times (once a worker restarted a moment before, while it joins) and starts each again with
# --rejoin; the run finishes, the restarted workers are welcomed back, and all four are in the last
# outer step. Then three partitions through the link emulator. The storms run over the bulk data
# plane (the default, one connection a peer) unless they name ZeroMQ. Run by ctest as `cmake -P`
# with NARROWS, SRC and WORK set.
include(${SRC}/tests/cli/deploy_corpus.cmake)
file(WRITE ${WORK}/chaos.yaml "name: chaos\nseed: 3\nthreads: 1\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
     "train: {steps: 4000, batch_size: 4, warmup_steps: 4}\neval: {every: 100, batches: 2, batch_size: 4}\n"
     "workers: {count: 4}\noutput: {dir: out, log_every: 50}\n"
     "deploy: {security: plain, heartbeat_s: 0.1, timeout_s: 1.0, collective_timeout_s: 30}\n"
     "compare: [{algorithm: diloco, inner_steps: 10, name: dl}]\n")
# Runs `narrows launch --local 4 ${storm_yaml} -q ARGN` (chaos.yaml unless set) as the run NAME;
# fails unless it ends with exit 0. Leaves the entry's events in `events` and the output in `out`
# and `err`.
set(storm_yaml chaos.yaml)
macro(storm name)
  execute_process(COMMAND ${NARROWS} launch --local 4 ${storm_yaml} -q --set name=${name} ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 240)
  set(events "")
  if(EXISTS ${WORK}/out/${name}/dl/events.jsonl)
    file(READ ${WORK}/out/${name}/dl/events.jsonl events)
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: exit ${rc}; events:\n${events}\n${out}${err}")
  endif()
endmacro()
storm(chaos --chaos "{seed: 3, kills: 4, mean_interval_s: 2.5, restart_after_s: 0.5, from_s: 1.5, until_s: 10}")
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
# What the killed processes recorded before they died (their spools, on this machine) is gathered
# by rank 0 into the entry's records, and no spool file is left.
string(FIND "${events}" "\"type\":\"gathered_spool\"" gathered)
file(GLOB left ${WORK}/out/chaos/dl/spool/*)
if(gathered EQUAL -1 OR left)
  message(FATAL_ERROR "chaos: killed processes' spools not gathered (left: ${left}):\n${events}")
endif()
# The storm replayed in the emulator from its membership (who was in each outer step, who was
# welcomed back when): every evaluation, every outer step's parameters and the final loss equal bit
# for bit. A failure prints the run's events other than its outer steps (and the launcher's), and
# the outer steps around the first that differs.
macro(replayed name)
  execute_process(COMMAND ${NARROWS} replay out/${name} -q RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK} TIMEOUT 240)
  string(REGEX MATCH "dl +[0-9]+ +([0-9]+) of ([0-9]+) [^\n]*bit for bit" agreed "${out}")
  if(NOT rc EQUAL 0 OR NOT agreed OR NOT CMAKE_MATCH_1 EQUAL CMAKE_MATCH_2 OR CMAKE_MATCH_2 LESS 10)
    file(STRINGS ${WORK}/out/${name}/dl/events.jsonl others REGEX "\"type\":\"(crash|evicted|join|repeated|renoticed|stale_dropped|leave|nonfinite_outer_gradient)\"")
    list(JOIN others "\n" others)
    set(near "")
    string(REGEX MATCH "outer step at ([0-9]+)" first "${out}")
    if(first)
      file(STRINGS ${WORK}/out/${name}/dl/events.jsonl near REGEX "\"step\":${CMAKE_MATCH_1}[,}]")
      list(JOIN near "\n" near)
    endif()
    message(FATAL_ERROR "replay of ${name}: exit ${rc}\n${out}${err}\nevents:\n${others}\nat the first differing outer step:\n${near}")
  endif()
endmacro()
replayed(chaos)
# A restart due at once (restart_after_s: 0) comes before the killed process's exit is reaped: the
# launcher counts each process once still, and ends when the run does (it waited forever before).
storm(instant --set train.steps=1000 --chaos "{seed: 3, kills: 3, mean_interval_s: 1, restart_after_s: 0, from_s: 1.5, until_s: 6}")
file(STRINGS ${WORK}/out/instant/chaos.jsonl restarts REGEX "chaos_restart\"")
list(LENGTH restarts nrestarts)
if(NOT nrestarts EQUAL 3)
  message(FATAL_ERROR "instant restarts: ${nrestarts} restarts, expected 3:\n${events}")
endif()
replayed(instant)
# A copy of the run altered (FILE: what the alteration left in dl/FILE) is told apart by its
# replay: exit 1, and EXPECTED (the place named) in what it prints.
macro(told_apart file expected)
  file(WRITE ${WORK}/out/altered/dl/${file} "${altered}")
  file(REMOVE_RECURSE ${WORK}/out/altered-replay)
  execute_process(COMMAND ${NARROWS} replay out/altered -q RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK} TIMEOUT 240)
  string(FIND "${out}" "${expected}" at)
  if(NOT rc EQUAL 1 OR at EQUAL -1)
    message(FATAL_ERROR "replay of an altered run (${file}): exit ${rc}, expected 1 and '${expected}'\n${out}${err}")
  endif()
endmacro()
file(REMOVE_RECURSE ${WORK}/out/altered)
file(COPY ${WORK}/out/chaos/ DESTINATION ${WORK}/out/altered)
# One evaluation changed: the step named.
file(READ ${WORK}/out/altered/dl/metrics.jsonl metrics)
string(FIND "${metrics}" "\"val_loss\":" at REVERSE)
string(SUBSTRING "${metrics}" 0 ${at} head)
string(SUBSTRING "${metrics}" ${at} -1 tail)
string(REGEX REPLACE "^\"val_loss\":[0-9.e+-]+" "\"val_loss\":9.5" tail "${tail}")
set(altered "${head}${tail}")
if(at EQUAL -1 OR altered STREQUAL metrics)
  message(FATAL_ERROR "replay: could not alter the last evaluation of\n${metrics}")
endif()
told_apart(metrics.jsonl "differs from step 4000")
file(WRITE ${WORK}/out/altered/dl/metrics.jsonl "${metrics}")
# The parameters after one outer step changed (its digest), the losses as they were: that outer
# step named.
file(READ ${WORK}/out/altered/dl/events.jsonl events_text)
string(REGEX REPLACE "\"digest\":\"[0-9a-f]+\"(,\"participants\":\\[[0-9,]+\\],\"step\":2000,)" "\"digest\":\"0000000000000000\"\\1"
       altered "${events_text}")
if(altered STREQUAL events_text)
  message(FATAL_ERROR "replay: could not alter the digest of the outer step at 2000 in\n${events_text}")
endif()
told_apart(events.jsonl "parameters first differ after the outer step at 2000")
# Partitions through the link emulator (each worker in a network namespace; root): three workers
# are cut off from the others for 2.5 s, longer than deploy.timeout_s, so each stops (it cannot hear
# rank 0) and starts again; once healed it rejoins, and all four are in the last outer step.
storm(cuts --network home-100m --set train.steps=3000
      --chaos "{seed: 5, kills: 2, mean_interval_s: 3, restart_after_s: 0.5, from_s: 1.5, until_s: 20, partitions: 3, partition_interval_s: 3, partition_s: 2.5}")
# Every cut is healed; a cut worker stops and starts again (a cut may instead meet a worker that has
# just stopped for another reason, so at least one, not three).
foreach(kind chaos_partition chaos_heal chaos_fenced)
  file(STRINGS ${WORK}/out/cuts/chaos.jsonl lines REGEX "\"${kind}\"")
  list(LENGTH lines count)
  if((NOT kind STREQUAL "chaos_fenced" AND NOT count EQUAL 3) OR count EQUAL 0)
    message(FATAL_ERROR "chaos with partitions: ${count} ${kind}:\n${events}")
  endif()
endforeach()
string(FIND "${events}" "\"participants\":[0,1,2,3],\"step\":3000" at)
if(at EQUAL -1)
  message(FATAL_ERROR "chaos with partitions: not all four in the last outer step:\n${events}\n${out}${err}")
endif()
replayed(cuts)
# DDP (bucketed, overlapped with backward): a restarted worker votes itself in with the next step's
# all-reduce and is welcomed at the one after; replayed from its crash and join events (a step with
# a crash was reduced whole, not in buckets).
storm(ddp --set "compare=[{algorithm: ddp, name: dl}]" --set train.steps=1500
      --chaos "{seed: 3, kills: 3, mean_interval_s: 2, restart_after_s: 0.5, from_s: 1.5, until_s: 8}")
file(STRINGS ${WORK}/out/ddp/dl/events.jsonl joins REGEX "\"type\":\"join\"")
list(LENGTH joins njoins)
string(FIND "${events}" "\"type\":\"dropped\"" dropped)
if(njoins LESS 1 OR NOT dropped EQUAL -1)
  message(FATAL_ERROR "ddp chaos: ${njoins} joins, a restarted worker dropped (${dropped}):\n${events}\n${out}${err}")
endif()
replayed(ddp)
# DDP with its data over ZeroMQ instead of the bulk plane: kills inside its all-reduces drop
# partial messages, restarted processes connect anew; the run replays bit for bit.
storm(zeromq --set "compare=[{algorithm: ddp, name: dl}]" --set train.steps=1500 --set deploy.bulk_streams=0
      --chaos "{seed: 5, kills: 3, mean_interval_s: 2, restart_after_s: 0.5, from_s: 1.5, until_s: 8}")
string(FIND "${events}" "\"type\":\"join\"" joined)
if(joined EQUAL -1)
  message(FATAL_ERROR "chaos over ZeroMQ: no restarted worker joined:\n${events}\n${out}${err}")
endif()
replayed(zeromq)
# DDP over the bulk plane sealed under CURVE (chaos_curve.yaml: chaos.yaml with CURVE), 2
# connections per peer: each restarted process gets new pair keys (its peers' hellos are sealed for
# it), and the run replays bit for bit.
file(READ ${WORK}/chaos.yaml chaos_yaml)
string(REPLACE "security: plain, " "" curve_yaml "${chaos_yaml}")
file(WRITE ${WORK}/chaos_curve.yaml "${curve_yaml}")
set(storm_yaml chaos_curve.yaml)
storm(sealed --set "compare=[{algorithm: ddp, name: dl}]" --set train.steps=1500 --set deploy.bulk_streams=2
      --chaos "{seed: 5, kills: 3, mean_interval_s: 2, restart_after_s: 0.5, from_s: 1.5, until_s: 8}")
set(storm_yaml chaos.yaml)
string(FIND "${events}" "\"type\":\"join\"" joined)
if(joined EQUAL -1)
  message(FATAL_ERROR "sealed bulk chaos: no restarted worker joined:\n${events}\n${out}${err}")
endif()
replayed(sealed)
# DyLU: each round's inner steps come from the step times measured in it (wall time); the leader
# records every member's plan in its outer steps, and the replay follows it.
storm(dylu --set "compare=[{algorithm: diloco, inner_steps: 10, dylu: true, name: dl}]" --set train.steps=2000
      --chaos "{seed: 4, kills: 3, mean_interval_s: 2, restart_after_s: 0.5, from_s: 1.5, until_s: 8}")
replayed(dylu)
# Streaming DiLoCo without overlap (a fragment's synchronisation ends its round, as DiLoCo's): kills
# and restarts, replayed from its outer steps' members bit for bit.
storm(streaming --set "compare=[{algorithm: streaming-diloco, inner_steps: 10, fragments: 2, overlap_steps: 0, name: dl}]"
      --set train.steps=2000 --chaos "{seed: 3, kills: 3, mean_interval_s: 2, restart_after_s: 0.5, from_s: 1.5, until_s: 8}")
replayed(streaming)
# Async DiLoCo: a restarted worker joins the server again (a push of kind join) and trains on from
# the global parameters; the run ends at its budget.
storm(async --set "compare=[{algorithm: async-diloco, inner_steps: 10, name: dl}]" --set train.steps=2000
      --chaos "{seed: 3, kills: 3, mean_interval_s: 2, restart_after_s: 0.5, from_s: 1.5, until_s: 8}")
file(STRINGS ${WORK}/out/async/chaos.jsonl kills REGEX "chaos_kill")
file(STRINGS ${WORK}/out/async/dl/events.jsonl joins REGEX "\"type\":\"join\"")
list(LENGTH kills nkills)
list(LENGTH joins njoins)
if(NOT nkills EQUAL 3 OR njoins LESS 1)
  message(FATAL_ERROR "async chaos: ${nkills} kills (expected 3), ${njoins} joins:\n${events}\n${out}${err}")
endif()
# Its replay is refused, saying why: what a killed worker had computed is not in the events.
execute_process(COMMAND ${NARROWS} replay out/async -q RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                WORKING_DIRECTORY ${WORK} TIMEOUT 60)
string(FIND "${err}" "async-diloco is replayed from runs without crashes" at)
if(rc EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "replay of async chaos: exit ${rc}, expected a refusal\n${out}${err}")
endif()
# Without faults, with DyLU: the order in which the server took the pushes (the network's) and the
# inner-step counts it answered (from step times measured in wall time) are the run's own; the
# replay takes both from the server's arrival events and equals the run bit for bit.
storm(asyncorder --set "compare=[{algorithm: async-diloco, inner_steps: 10, dylu: true, name: dl}]" --set train.steps=1000)
replayed(asyncorder)
# A hostile member (a `corrupt` fault): from step 100 worker 2 sends every message 4 bytes short —
# well-formed, authenticated frames that no collective can use. The member that receives one evicts
# it, every member drops it, it is told why and stops (exit 3, which launch takes as a departure);
# the others finish without it, and the replay of the run's membership equals it bit for bit: none
# of its pieces reached a sum. The same for a member that sends every message twice under one
# sequence number (a `repeat` fault), over ZeroMQ and over the bulk plane: the second copy evicts it.
macro(hostile name fault deploy_extra reason)
  file(WRITE ${WORK}/${name}.yaml "name: ${name}\nseed: 3\nthreads: 1\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
       "train: {steps: 400, batch_size: 4, warmup_steps: 4}\neval: {every: 40, batches: 2, batch_size: 4}\n"
       "workers: {count: 3}\noutput: {dir: out, log_every: 20}\n"
       "deploy: {security: plain, heartbeat_s: 0.1, timeout_s: 1.0, collective_timeout_s: 30${deploy_extra}}\n"
       "faults: [{type: ${fault}, worker: 2, at_step: 100}]\ncompare: [{algorithm: diloco, inner_steps: 10, name: dl}]\n")
  execute_process(COMMAND ${NARROWS} launch --local 3 ${name}.yaml -q RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 120)
  file(READ ${WORK}/out/${name}/dl/events.jsonl events)
  foreach(expected "worker 2 was removed from the run" "\"type\":\"evicted\"" "${reason}"
          "\"participants\":[0,1],\"step\":400")
    string(FIND "${events}${err}" "${expected}" at)
    if(NOT rc EQUAL 0 OR at EQUAL -1)
      message(FATAL_ERROR "hostile member (${fault}): exit ${rc}, expected 0 and '${expected}':\n${events}\n${out}${err}")
    endif()
  endforeach()
  replayed(${name})
endmacro()
hostile(hostile corrupt "" "message from rank 2 has")
hostile(repeating repeat ", bulk_streams: 0" "(a repeated or reordered message)")
hostile(repeatingbulk repeat "" "again (a duplicated message)")
# Specs refused before anything starts, each with its reason: cuts need the link emulator; a typo.
macro(refused spec reason)
  execute_process(COMMAND ${NARROWS} launch --local 4 chaos.yaml -q --chaos "${spec}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 60)
  string(FIND "${err}" "${reason}" at)
  if(NOT rc EQUAL 2 OR at EQUAL -1)
    message(FATAL_ERROR "chaos with '${spec}': exit ${rc}, expected 2 and '${reason}'\n${out}${err}")
  endif()
endmacro()
refused("{partitions: 1}" "partitions cut links in the link emulator: add --network")
refused("{kills: 3, typo: 1}" "--chaos: unknown key 'typo'")
