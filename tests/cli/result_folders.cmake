# Result folders record the scenario that produced them and are reused only under the same one:
# a changed scenario into the same folder is refused (exit 2, naming the first key that differs and
# both values), --force runs it again, -o writes elsewhere; the same scenario is not run twice, and
# not reused from another build of narrows.
# Also the command line's own errors: unknown commands, overrides named as the user typed them,
# "did you mean", and `narrows list`. Run by ctest as `cmake -P` with NARROWS and WORK set.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
string(REPEAT "the quick brown fox jumps over the lazy dog. " 400 corpus)
file(WRITE ${WORK}/corpus.txt "${corpus}")
file(WRITE ${WORK}/r.yaml "name: r\nmodel: {preset: nano}\ndata: {path: corpus.txt}\nworkers: {count: 2}\n"
     "compute: {mode: modelled}\ntrain: {steps: 4, batch_size: 2}\neval: {batches: 1, batch_size: 2}\n"
     "compare: [ddp, diloco-h2]\noutput: {dir: out}\n")

# narrows ARGS... -> rc, out, err in the caller's scope.
macro(narrows name)
  execute_process(COMMAND ${NARROWS} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK})
  set(what "${name}: narrows ${ARGN}: exit ${rc}\nstdout: ${out}\nstderr: ${err}")
endmacro()
function(expect_text text)
  string(FIND "${out}${err}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "lacks '${text}':\n${what}")
  endif()
endfunction()
function(expect_rc expected)
  if(NOT rc EQUAL ${expected})
    message(FATAL_ERROR "expected exit ${expected}:\n${what}")
  endif()
endfunction()

# run: the same scenario twice is run once; another into the same folder is refused and changes
# nothing; --force runs it; -o puts it elsewhere.
narrows(first run r.yaml -q)
expect_rc(0)
file(READ ${WORK}/out/r/summary.json first_summary)
string(JSON digest GET "${first_summary}" scenario_digest)
string(LENGTH "${digest}" digest_length)
if(NOT digest_length EQUAL 16)
  message(FATAL_ERROR "summary.json records no scenario digest: ${first_summary}")
endif()
narrows(again run r.yaml -q)
expect_rc(0)
expect_text("finished before with this scenario (digest ${digest})")
narrows(other run r.yaml -q --set train.steps=6)
expect_rc(2)
expect_text("out/r holds the results of another scenario: train.steps is 4 there and 6 here")
expect_text("--force")
file(READ ${WORK}/out/r/summary.json after_refusal)
if(NOT after_refusal STREQUAL first_summary)
  message(FATAL_ERROR "a refused run changed the folder's summary.json")
endif()
# The same scenario made by another build of narrows is not taken as this build's: refused, naming
# both builds, until --force.
string(JSON build GET "${first_summary}" narrows)
narrows(version --version)
expect_text("(${build})")
string(REPLACE "\"narrows\": \"${build}\"" "\"narrows\": \"0123456789ab\"" older_summary "${first_summary}")
file(WRITE ${WORK}/out/r/summary.json "${older_summary}")
narrows(other_build run r.yaml -q)
expect_rc(2)
expect_text("out/r holds results of this scenario made by narrows 0123456789ab, and this is narrows ${build}")
file(WRITE ${WORK}/out/r/summary.json "${first_summary}")
narrows(numbers_by_value run r.yaml -q --set train.lr=0.0030000000000000001)
expect_rc(0)
expect_text("finished before with this scenario")
narrows(forced run r.yaml -q --set train.steps=6 --force)
expect_rc(0)
file(READ ${WORK}/out/r/scenario.yaml forced_yaml)
string(FIND "${forced_yaml}" "steps: 6" at)
if(at EQUAL -1)
  message(FATAL_ERROR "--force did not run the new scenario: ${forced_yaml}")
endif()
narrows(elsewhere run r.yaml -q --set train.steps=5 -o out/five)
expect_rc(0)
if(NOT EXISTS ${WORK}/out/five/summary.json OR NOT EXISTS ${WORK}/out/r/summary.json)
  message(FATAL_ERROR "-o out/five: ${what}")
endif()
file(MAKE_DIRECTORY ${WORK}/notes)
file(WRITE ${WORK}/notes/todo.txt "mine")
narrows(foreign run r.yaml -q -o notes --force)
expect_rc(2)
expect_text("no scenario.yaml says what produced it")
if(NOT EXISTS ${WORK}/notes/todo.txt)
  message(FATAL_ERROR "--force removed a folder that was not a run folder")
endif()

# run --seeds: a second run with more seeds reuses the seeds that finished, under the same scenario.
narrows(seeds2 run r.yaml -q --seeds 2 -o out/seeds)
expect_rc(0)
narrows(seeds3 run r.yaml --seeds 3 -o out/seeds)
expect_rc(0)
expect_text("seed 0: finished before")
expect_text("seed 1: finished before")
narrows(seeds_other run r.yaml -q --seeds 3 -o out/seeds --set train.batch_size=4)
expect_rc(2)
expect_text("train.batch_size is 2 there and 4 here")

# sweep: points reused only under the same scenario.
narrows(sweep4 sweep r.yaml -q --grid workers.count=2,3)
expect_rc(0)
narrows(sweep_same sweep r.yaml -q --grid workers.count=2,3)
expect_rc(0)
expect_text("2 points, 2 finished before, 0 to run")
narrows(sweep_other sweep r.yaml -q --grid workers.count=2,3 --set train.steps=6)
expect_rc(2)
expect_text("grid point count-2: ")
expect_text("train.steps is 4 there and 6 here")
narrows(sweep_o sweep r.yaml -q --grid workers.count=2 --set train.steps=6 -o out/sweep6)
expect_rc(0)
if(NOT EXISTS ${WORK}/out/sweep6/results.csv)
  message(FATAL_ERROR "sweep -o: ${what}")
endif()
narrows(sweep_force sweep r.yaml -q --grid workers.count=2,3 --set train.steps=6 --force)
expect_rc(0)
expect_text("2 points, 0 finished before, 2 to run")

# The command line's own errors.
narrows(unknown_command rnu r.yaml)
expect_rc(2)
expect_text("unknown command 'rnu' (did you mean 'run'?)")
narrows(unknown_override validate r.yaml --set trian.steps=10)
expect_rc(2)
expect_text("--set trian.steps=10: trian: unknown key (did you mean 'train'?)")
narrows(override_in_list validate r.yaml --set "compare=[ddp, dilocco]")
expect_rc(2)
expect_text("--set compare=[ddp, dilocco]: compare[1]: unknown algorithm 'dilocco' (did you mean 'diloco'?)")
narrows(profile_typo validate r.yaml --set network.profile=home-100g)
expect_rc(2)
expect_text("(did you mean 'home-100m'?)")
narrows(one_error validate r.yaml --set workers.count=eight --set workers.speed=[1,0.5])
expect_rc(2)
string(REGEX MATCHALL "\n" lines "${err}")
list(LENGTH lines n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "a bad workers.count gave follow-on errors:\n${err}")
endif()
narrows(list_profiles list profiles)
expect_rc(0)
expect_text("dc-100g")
narrows(list_presets list presets)
expect_rc(0)
expect_text("gpt2-124m")
narrows(list_bad list moduels)
expect_rc(2)

# A user's scenario written from an empty file: two islands of 4 joined by a 1 Gbit/s, 40 ms WAN,
# dc-100g inside each, worker 7 at half speed, worker 5 leaving at step 30, DDP against DiLoCo H = 20
# and Streaming DiLoCo with int4 outer gradients, modelled compute, 60 steps. The run ends with its
# figures' invariants checked (a contradiction fails it); its leave is stamped after the worker's
# last step; the planner says what it leaves out (the leave), and without it predicts DDP and DiLoCo
# within 5% of the emulator, so `run` gives the speed-up at this host's rate.
file(WRITE ${WORK}/wan8.yaml "name: wan8\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
     "workers: {count: 8, speed: [1, 1, 1, 1, 1, 1, 1, 0.5]}\n"
     "network: {topology: islands, islands: [[0, 1, 2, 3], [4, 5, 6, 7]], profile: custom, bandwidth_bps: 1.0e9,\n"
     "  latency_ms: 40, intra: {profile: dc-100g}}\n"
     "faults: [{type: leave, worker: 5, at_step: 30}]\n"
     "compute: {mode: modelled, device_flops: 5.0e10}\ntrain: {steps: 60, batch_size: 4}\neval: {every: 20, batches: 2}\n"
     "compare: [ddp, diloco-h20, {algorithm: streaming-diloco, name: streaming-int4, inner_steps: 20, fragments: 2,\n"
     "  outer_gradient: int4}]\noutput: {dir: out}\n")
narrows(wan8 run wan8.yaml -q)
expect_rc(0)
file(READ ${WORK}/out/wan8/ddp/events.jsonl events)
string(REGEX MATCH "\"type\":\"leave\"[^}]*" leave "${events}")
if(leave STREQUAL "")
  message(FATAL_ERROR "no leave event in out/wan8/ddp/events.jsonl:\n${events}")
endif()
narrows(wan8_plan plan wan8.yaml)
expect_rc(0)
expect_text("plan: left out: faults[0]: the planner keeps every worker for the whole run")
narrows(wan8_steady run wan8.yaml -q --set faults=[] -o out/wan8-steady)
expect_rc(0)
file(READ ${WORK}/out/wan8-steady/summary.json steady)
foreach(entry ddp diloco-h20)
  string(JSON error GET "${steady}" host planner_error ${entry})
  if(error GREATER 0.05 OR error LESS -0.05)
    message(FATAL_ERROR "the planner is ${error} off the emulator for ${entry} on the islands")
  endif()
endforeach()
