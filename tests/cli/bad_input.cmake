# Bad input on the command line and in scenario files: exit status 2, one clear message naming
# the place, no stack trace. Run by ctest as `cmake -P` with NARROWS, SRC and WORK set.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(expect_failure name expected_rc expected_text)
  execute_process(COMMAND ${NARROWS} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK})
  if(NOT rc EQUAL ${expected_rc})
    message(FATAL_ERROR "${name}: exit ${rc}, expected ${expected_rc}\nstdout: ${out}\nstderr: ${err}")
  endif()
  string(FIND "${out}${err}" "${expected_text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${name}: output lacks '${expected_text}'\nstdout: ${out}\nstderr: ${err}")
  endif()
  string(FIND "${err}" "terminate called" crash)
  if(NOT crash EQUAL -1)
    message(FATAL_ERROR "${name}: crashed\n${err}")
  endif()
endfunction()

file(WRITE ${WORK}/typo.yaml "model:\n  preset: tiny\ntrain:\n  stpes: 10\n")
expect_failure(unknown_key 2 "typo.yaml:4:3: train.stpes: unknown key" validate typo.yaml)
expect_failure(unknown_key_train 2 "train.stpes: unknown key" train typo.yaml)
expect_failure(missing_file 2 "nope.yaml: cannot open" validate nope.yaml)
expect_failure(bad_override 2 "--set train.lr=abc: train.lr: expected a number" validate
               ${SRC}/scenarios/quickstart.yaml --set train.lr=abc)
expect_failure(no_subcommand 2 "" --bogus-flag)
file(WRITE ${WORK}/missing_data.yaml "data: {path: /nonexistent/corpus.txt}\noutput: {dir: out}\n")
expect_failure(missing_data 2 "data.path: '/nonexistent/corpus.txt' does not exist" train missing_data.yaml)
expect_failure(missing_data_validate 2 "missing_data.yaml:1:14: data.path: '/nonexistent/corpus.txt' does not exist"
               validate missing_data.yaml)
file(WRITE ${WORK}/negative.yaml "workers: {count: -3}\n")
expect_failure(negative_count 2 "negative.yaml:1:18: workers.count: expected an integer in [1, 4096], got -3"
               validate negative.yaml)
expect_failure(huge_count 2 "--set workers.count=100000000: workers.count: expected an integer in [1, 4096]"
               validate negative.yaml --set workers.count=100000000)
expect_failure(deploy_seeds 2 "seeds: 2: a deployment runs one seed at a time"
               launch ${SRC}/scenarios/quickstart.yaml --local 4 --set seeds=2)
expect_failure(packet_log_without_network 2 "--packet-log logs the link emulator's packets: add --network PROFILE"
               launch ${SRC}/scenarios/quickstart.yaml --local 2 --packet-log)
expect_failure(zero_seeds 2 "--seeds: Value 0 not in range" run ${SRC}/scenarios/quickstart.yaml --seeds 0)
file(WRITE ${WORK}/prose.yaml "This is not a scenario.\n")
expect_failure(not_yaml_mapping 2 "prose.yaml:1:1: expected a mapping of keys at the top level" validate prose.yaml)
if(EXISTS ${WORK}/out)
  message(FATAL_ERROR "a failed run must not create its run folder")
endif()

file(WRITE ${WORK}/bad_compare.yaml "compare: [ddp, diloco-hfast]\noutput: {dir: out}\n")
expect_failure(bad_compare 2 "bad_compare.yaml:1:16: compare[1]: unknown algorithm 'diloco-hfast'" run bad_compare.yaml)
expect_failure(bad_worker 2 "faults[0].worker: expected an integer in [0, 1]" run ${SRC}/scenarios/quickstart.yaml
               --set workers.count=2 --set "faults=[{type: leave, worker: 7}]")
expect_failure(emulated_after_sends 2 "faults[0].after_sends: a crash inside a collective or after a stall needs a deployment"
               run ${SRC}/scenarios/quickstart.yaml --set workers.count=2
               --set "faults=[{type: crash, worker: 1, at_step: 3, after_sends: 2}]")

# A whole `narrows run` on a tiny corpus: exit 0, the table, and the run folder's files.
string(REPEAT "the quick brown fox jumps over the lazy dog. " 400 corpus)
file(WRITE ${WORK}/corpus.txt "${corpus}")
file(WRITE ${WORK}/small_run.yaml "name: small_run\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
     "workers: {count: 2}\ncompute: {mode: modelled}\ntrain: {steps: 4, batch_size: 2}\n"
     "eval: {batches: 1, batch_size: 2}\ncompare: [ddp, diloco-h2]\noutput: {dir: out}\n")
execute_process(COMMAND ${NARROWS} run small_run.yaml -q RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                WORKING_DIRECTORY ${WORK})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "narrows run failed: ${out}${err}")
endif()
foreach(f summary.json scenario.yaml ddp/metrics.jsonl ddp/events.jsonl diloco-h2/metrics.jsonl)
  if(NOT EXISTS ${WORK}/out/small_run/${f})
    message(FATAL_ERROR "narrows run did not write ${f}")
  endif()
endforeach()
# `narrows replay` takes a deployment's run: not a folder that is none, nor an emulated run.
file(WRITE ${WORK}/corrupt.yaml "name: corrupt\nmodel: {preset: nano}\ndata: {path: corpus.txt}\nworkers: {count: 2}\n"
     "train: {steps: 4, batch_size: 2}\nfaults: [{type: corrupt, worker: 1, at_step: 2}]\noutput: {dir: out}\n")
expect_failure(corrupt_emulated 2 "faults[0]: a corrupt sender needs a deployment" run corrupt.yaml -q)
file(WRITE ${WORK}/repeat.yaml "name: repeat\nmodel: {preset: nano}\ndata: {path: corpus.txt}\nworkers: {count: 2}\n"
     "train: {steps: 4, batch_size: 2}\nfaults: [{type: repeat, worker: 1, at_step: 2}]\noutput: {dir: out}\n")
expect_failure(repeat_emulated 2 "faults[0]: a repeating sender needs a deployment" run repeat.yaml -q)
expect_failure(replay_nowhere 2 "nowhere/summary.json: cannot be read" replay nowhere)
expect_failure(replay_emulated 2 "out/small_run: not a deployment's run (its clock is virtual)" replay out/small_run)
string(FIND "${out}" "diloco-h2" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the results table lacks diloco-h2:\n${out}")
endif()
# Equal quality: with no target_loss the target is the worst final loss, which every entry reaches;
# the entry with the worst loss reaches it at its last evaluation, and the table says so.
file(READ ${WORK}/out/small_run/summary.json summary)
string(JSON target GET "${summary}" target_loss)
string(JSON source GET "${summary}" target_source)
if(NOT source STREQUAL "worst final loss")
  message(FATAL_ERROR "summary.json target_source: ${source}")
endif()
foreach(i 0 1)
  string(JSON final GET "${summary}" results ${i} final_val_loss)
  string(JSON reached GET "${summary}" results ${i} time_to_target_s)
  string(JSON total GET "${summary}" results ${i} time_s)
  string(JSON bytes GET "${summary}" results ${i} bytes_to_target)
  if(reached STREQUAL "" OR reached STREQUAL "null" OR bytes STREQUAL "null" OR reached GREATER total)
    message(FATAL_ERROR "entry ${i}: time to the target ${reached} (of ${total}), bytes ${bytes}")
  endif()
  if(final STREQUAL target AND NOT reached STREQUAL total)
    message(FATAL_ERROR "entry ${i} has the worst loss but reached it at ${reached}, not at its end ${total}")
  endif()
endforeach()
string(FIND "${out}" "at equal loss (" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the results table lacks the equal-loss comparison:\n${out}")
endif()
# A link down for far longer than network.stall_timeout_s: the run fails in either network model,
# naming the link, and keeps what it wrote before.
foreach(model analytic ns3)
  expect_failure(stall_${model} 1 "to worker 1 has moved no byte since 0.000 s (now 50.000 s); its route: up:0, down:1 (down since 0 s)" run small_run.yaml -q
                 --set output.dir=stalled-${model} --set network.model=${model} --set network.stall_timeout_s=50
                 --set "faults=[{type: link_down, link: \"worker:1\", from_s: 0, to_s: 1e9}]" --set "compare=[ddp]")
  if(NOT EXISTS ${WORK}/stalled-${model}/small_run/ddp/events.jsonl)
    message(FATAL_ERROR "a stalled run lost its events")
  endif()
endforeach()
execute_process(COMMAND ${NARROWS} run small_run.yaml -q --set target_loss=0.001 --set output.dir=never
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
file(READ ${WORK}/never/small_run/summary.json summary)
string(JSON reached GET "${summary}" results 0 time_to_target_s)
string(FIND "${out}" "never" at)
if(NOT rc EQUAL 0 OR NOT (reached STREQUAL "null" OR reached STREQUAL "") OR at EQUAL -1)
  message(FATAL_ERROR "an unreachable target: exit ${rc}, time ${reached}\n${out}${err}")
endif()

# An entry that diverges (outer lr 100) does not set the target: the others' worst final loss does,
# and the table says "diverged" for it.
execute_process(COMMAND ${NARROWS} run small_run.yaml -q --set output.dir=diverged
                --set "compare=[ddp, {name: blowup, algorithm: diloco, inner_steps: 2, outer_lr: 100}]"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
file(READ ${WORK}/diverged/small_run/summary.json summary)
string(JSON target GET "${summary}" target_loss)
string(JSON ddp_final GET "${summary}" results 0 final_val_loss)
string(JSON blowup_diverged GET "${summary}" results 1 diverged)
string(FIND "${out}" "diverged" at)
if(NOT rc EQUAL 0 OR NOT target STREQUAL ddp_final OR NOT blowup_diverged STREQUAL "ON" OR at EQUAL -1)
  message(FATAL_ERROR "a diverged entry: exit ${rc}, target ${target} (ddp ${ddp_final}), diverged ${blowup_diverged}\n${out}${err}")
endif()

# Warm starts: from `narrows train`'s model.ckpt, and from pre-training cached in the run folder.
execute_process(COMMAND ${NARROWS} train small_run.yaml -q --set output.dir=trained RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
if(NOT rc EQUAL 0 OR NOT EXISTS ${WORK}/trained/small_run/model.ckpt)
  message(FATAL_ERROR "narrows train wrote no model.ckpt: ${out}${err}")
endif()
execute_process(COMMAND ${NARROWS} run small_run.yaml -q --set output.dir=warm
                --set warm_start.checkpoint=trained/small_run/model.ckpt
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "a run from a model.ckpt failed: ${out}${err}")
endif()
execute_process(COMMAND ${NARROWS} run small_run.yaml -o warm/pretrained --set warm_start.steps=3
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
file(GLOB cached ${WORK}/warm/warm_start/pretrained-*.ckpt)
if(NOT rc EQUAL 0 OR NOT cached)
  message(FATAL_ERROR "a run with warm_start.steps cached nothing: ${out}${err}")
endif()
file(WRITE ${WORK}/not_a_model.ckpt "NRWC but not really")
expect_failure(bad_model_file 2 "not_a_model.ckpt" run small_run.yaml -o warm/bad_model
               --set warm_start.checkpoint=not_a_model.ckpt)

execute_process(COMMAND ${NARROWS} validate ${SRC}/scenarios/quickstart.yaml RESULT_VARIABLE rc
                OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "quickstart.yaml does not validate: ${out}")
endif()
