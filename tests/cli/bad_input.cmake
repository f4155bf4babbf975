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
if(EXISTS ${WORK}/out)
  message(FATAL_ERROR "a failed run must not create its run folder")
endif()

execute_process(COMMAND ${NARROWS} validate ${SRC}/scenarios/quickstart.yaml RESULT_VARIABLE rc
                OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "quickstart.yaml does not validate: ${out}")
endif()
