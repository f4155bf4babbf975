# Included by the deployment tests (deploy, slurm, launcher): running a command that must succeed,
# comparing two runs' metrics line by line, and a two-worker run that a launcher must match.
function(run_ok name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK}
                  TIMEOUT 300)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: exit ${rc}\nstdout: ${out}\nstderr: ${err}")
  endif()
  set(out "${out}${err}" PARENT_SCOPE)
endfunction()

function(expect_in name text haystack)
  string(FIND "${haystack}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${name}: lacks '${text}' in:\n${haystack}")
  endif()
endfunction()

# Lines of metrics.jsonl `a` and `b` from step `from` on must agree on train_loss, val_loss, bytes_sent
# (or on val_loss and the keys given after `from`).
function(expect_same_metrics name a b from)
  set(keys train_loss bytes_sent)
  if(ARGN)
    set(keys ${ARGN})
  endif()
  file(STRINGS ${a} la)
  file(STRINGS ${b} lb)
  list(LENGTH la na)
  list(LENGTH lb nb)
  if(NOT na EQUAL nb OR na EQUAL 0)
    message(FATAL_ERROR "${name}: ${na} lines in ${a}, ${nb} in ${b}")
  endif()
  math(EXPR last "${na} - 1")
  set(compared 0)
  foreach(i RANGE ${last})
    list(GET la ${i} x)
    list(GET lb ${i} y)
    string(JSON step GET "${x}" step)
    if(step LESS ${from})
      continue()
    endif()
    foreach(key ${keys})
      string(JSON vx GET "${x}" ${key})
      string(JSON vy GET "${y}" ${key})
      if(NOT vx STREQUAL vy)
        message(FATAL_ERROR "${name}: step ${step}: ${key} ${vx} != ${vy}")
      endif()
    endforeach()
    string(JSON vx ERROR_VARIABLE no_x GET "${x}" val_loss)
    string(JSON vy ERROR_VARIABLE no_y GET "${y}" val_loss)
    if(NOT "${vx}${no_x}" STREQUAL "${vy}${no_y}")
      message(FATAL_ERROR "${name}: step ${step}: val_loss ${vx} != ${vy}")
    endif()
    math(EXPR compared "${compared} + 1")
  endforeach()
  if(compared EQUAL 0)
    message(FATAL_ERROR "${name}: no lines compared")
  endif()
endfunction()

# The launchers' reference: scenario `name` (2 workers, DDP and DiLoCo H = 4, seed `seed`) written
# to ${WORK}/name.yaml and run with `narrows launch --local 2` into ${WORK}/local; a CURVE key in
# ${WORK}/cluster.key for the launched workers.
function(launch_two_workers_locally name seed)
  string(CONCAT scenario "name: ${name}\nseed: ${seed}\nthreads: 1\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
         "train: {steps: 16, batch_size: 4, warmup_steps: 2}\neval: {every: 8, batches: 2, batch_size: 4}\n"
         "compute: {mode: modelled, device_flops: 1e9}\nworkers: {count: 2}\noutput: {dir: local, log_every: 1}\n"
         "compare: [ddp, diloco-h4]\n")
  file(WRITE ${WORK}/${name}.yaml "${scenario}")
  run_ok(local ${NARROWS} launch --local 2 ${name}.yaml -q)
  run_ok(keygen ${NARROWS} keygen ${WORK}/cluster.key)
endfunction()

# Each entry of scenario `name` run into ${WORK}/`dir` equals launch_two_workers_locally's, step by
# step: train losses, validation losses and bytes.
function(expect_same_as_local name dir)
  foreach(entry ddp diloco-h4)
    expect_same_metrics(${dir}_${entry} ${WORK}/local/${name}/${entry}/metrics.jsonl ${WORK}/${dir}/${name}/${entry}/metrics.jsonl
                        0 train_loss bytes_sent)
  endforeach()
endfunction()
