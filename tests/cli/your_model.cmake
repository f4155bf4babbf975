# A model of the user's (model.torchscript): tools/export-model's three modules trained in the
# emulator by DDP, DiLoCo and Streaming DiLoCo with int8 outer gradients (the GRU, without numbered
# blocks, by DDP and DiLoCo), the GPT by two real processes (launch --local 2) to the emulator's
# losses; and each bad module refused with exit 2, naming what is wrong, before anything runs.
# Run by ctest as `cmake -P` with NARROWS, SRC, WORK and MODELS set.
include(${SRC}/tests/cli/deploy_corpus.cmake)
include(${SRC}/tests/cli/deploy_common.cmake)

function(write_scenario name model blocks compare)
  set(layers "")
  if(blocks)
    set(layers ", n_layers: ${blocks}")
  endif()
  file(WRITE ${WORK}/${name}.yaml "name: ${name}\nseed: 1\nthreads: 1\nmodel: {torchscript: ${model}${layers}, seq_len: 32}\n"
       "data: {path: corpus.txt}\ntrain: {steps: 12, batch_size: 4, warmup_steps: 2}\n"
       "eval: {every: 6, batches: 2, batch_size: 4}\ncompute: {mode: modelled, device_flops: 1e10}\n"
       "workers: {count: 2}\noutput: {dir: runs, log_every: 1}\ncompare: ${compare}\n")
endfunction()

# ${WORK}/name.pt: a small module that trains normally for its first 6 forwards, then runs the
# Python statement `late` (on `out`, its logits) at every later one.
function(late_module name late)
  file(WRITE ${WORK}/${name}.py "
import torch
class Late(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(256, 16)
        self.head = torch.nn.Linear(16, 256)
        self.register_buffer('calls', torch.zeros(1, dtype=torch.int64))
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = self.head(self.emb(tokens))
        if int(self.calls.item()) > 6:
            ${late}
        return out
torch.jit.script(Late()).save('${WORK}/${name}.pt')
")
  execute_process(COMMAND /usr/bin/python3 ${WORK}/${name}.py RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "exporting ${name}: ${err}")
  endif()
endfunction()

set(three "[ddp, diloco-h4, {algorithm: streaming-diloco, inner_steps: 4, fragments: 2, outer_gradient: int8, name: streaming-int8}]")
write_scenario(gpt ${MODELS}/gpt.pt 4 "${three}")
write_scenario(llama ${MODELS}/llama.pt 4 "${three}")
write_scenario(gru ${MODELS}/gru.pt "" "[ddp, diloco-h4]")
foreach(model gpt llama gru)
  run_ok(${model} ${NARROWS} run ${model}.yaml -q)
  file(READ ${WORK}/runs/${model}/summary.json summary)
  string(JSON n LENGTH "${summary}" results)
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON name GET "${summary}" results ${i} name)
    string(JSON loss GET "${summary}" results ${i} final_val_loss)
    # Trained: below the uniform guess over 256 bytes, ln 256 = 5.545 nats.
    if(NOT loss LESS 5.5)
      message(FATAL_ERROR "${model} ${name}: final validation loss ${loss} after 12 steps")
    endif()
  endforeach()
endforeach()

# Real processes train the same module to the emulator's losses, step by step.
write_scenario(pair ${MODELS}/gpt.pt 4 "[ddp, diloco-h4]")
run_ok(emulated ${NARROWS} run pair.yaml -q -o runs/emulated)
run_ok(launched ${NARROWS} launch --local 2 pair.yaml -q -o runs/launched)
foreach(entry ddp diloco-h4)
  expect_same_metrics(launched_${entry} ${WORK}/runs/emulated/${entry}/metrics.jsonl
                      ${WORK}/runs/launched/${entry}/metrics.jsonl 0 train_loss)
endforeach()

# Bad modules: exit 2, the file and what is wrong named, no run folder written.
file(WRITE ${WORK}/text.pt "not a module\n")
# (torch.jit.script reads the class's source: a file, not python3 -c.)
file(WRITE ${WORK}/flat.py "
import torch
class NoVocab(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens.float() * self.w
torch.jit.script(NoVocab()).save('${WORK}/flat.pt')
")
execute_process(COMMAND /usr/bin/python3 ${WORK}/flat.py RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "exporting the bad module: ${err}")
endif()
# A module whose logits turn NaN halfway: not refused (its first forward is finite), but run as any
# diverging entry is: it ends, and the summary and the table say that it diverged.
late_module(late_nan "out = out * float('nan')")
execute_process(COMMAND ${NARROWS} run gru.yaml --set model.torchscript=late_nan.pt --set train.lr=0.05 -o runs/nan
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
message(STATUS "a module turning NaN: exit ${rc}\n${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "a run with a diverging entry: exit ${rc}: ${err}")
endif()
# DDP's replicas turn NaN at their 7th forward, and so does its model: it diverged, never reaches the
# target, and no comparison at equal loss is made against it. (DiLoCo's workers turn NaN too; their
# pseudo-gradients are left out of the outer step, as any non-finite one is, and its global model
# stays as it was.)
file(READ ${WORK}/runs/nan/summary.json summary)
string(JSON name GET "${summary}" results 0 name)
string(JSON diverged GET "${summary}" results 0 diverged)
string(JSON to_target GET "${summary}" results 0 time_to_target_s)
if(NOT diverged STREQUAL "ON" OR NOT to_target STREQUAL "")
  message(FATAL_ERROR "${name}: a module turning NaN: diverged ${diverged}, time to target '${to_target}'")
endif()
expect_in(nan_curve "DIVERGED" "${out}")
expect_in(nan_equal_loss "relative to ddp: none: ddp diverged" "${out}")

# A module that raises at a later batch than the checks try: the run ends with the worker's error
# (exit 1), the exception's own message quoted, not with an abort.
late_module(boom "raise RuntimeError('boom at a later batch')")
execute_process(COMMAND ${NARROWS} run gru.yaml -q --set model.torchscript=boom.pt -o runs/boom
                RESULT_VARIABLE rc ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 120)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "a module raising mid-run: exit ${rc}, not 1: ${err}")
endif()
expect_in(boom "stopped by an exception: builtins.RuntimeError: boom at a later batch" "${err}")

run_ok(vocab300 ${SRC}/tools/export-model ${WORK}/v300 --only gpt --vocab 300)
foreach(case "missing.pt|cannot read missing.pt"
             "text.pt|not a TorchScript module saved by torch.jit.save"
             "flat.pt|returned [2, 32]; expected logits [2, 32, 256]"
             "v300/gpt.pt|returned [2, 32, 300]; expected logits [2, 32, 256] (the data's vocabulary has 256 tokens)")
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 file)
  list(GET parts 1 expected)
  string(MAKE_C_IDENTIFIER "${file}" id)
  execute_process(COMMAND ${NARROWS} run gru.yaml -q --set model.torchscript=${file} -o runs/bad-${id}
                  RESULT_VARIABLE rc ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "${file}: exit ${rc}, not 2: ${err}")
  endif()
  expect_in(${file} "${expected}" "${err}")
  if(EXISTS ${WORK}/runs/bad-${id})
    message(FATAL_ERROR "${file}: a run folder was written for a module refused")
  endif()
endforeach()

# The same path holding another module on another host: rank 0 refuses the process whose module
# differs (its parameter count and file digest), naming both, before anything trains.
foreach(side a b)
  file(MAKE_DIRECTORY ${WORK}/${side})
  file(COPY ${WORK}/corpus.txt DESTINATION ${WORK}/${side})
  file(WRITE ${WORK}/${side}/two.yaml "name: two\nseed: 1\nthreads: 1\nmodel: {torchscript: model.pt, seq_len: 32}\n"
       "data: {path: corpus.txt}\ntrain: {steps: 2, batch_size: 2}\nworkers: {count: 2}\noutput: {dir: out}\n"
       "deploy: {security: plain}\ncompare: [ddp]\n")
endforeach()
file(COPY_FILE ${MODELS}/gpt.pt ${WORK}/a/model.pt)
file(COPY_FILE ${MODELS}/llama.pt ${WORK}/b/model.pt)
string(RANDOM LENGTH 4 ALPHABET 123456789 port_offset)
math(EXPR port "20000 + ${port_offset} % 20000")
execute_process(COMMAND ${CMAKE_COMMAND} -E chdir ${WORK}/a ${NARROWS} worker two.yaml -q --bind 127.0.0.1 --rank 0
                        --world 2 --master 127.0.0.1:${port} --connect-timeout 8
                COMMAND ${CMAKE_COMMAND} -E chdir ${WORK}/b ${NARROWS} worker two.yaml -q --bind 127.0.0.1 --rank 1
                        --world 2 --master 127.0.0.1:${port} --connect-timeout 8
                RESULTS_VARIABLE rcs ERROR_VARIABLE err OUTPUT_VARIABLE out TIMEOUT 60)
list(GET rcs 1 rc1)
if(rc1 EQUAL 0)
  message(FATAL_ERROR "a worker whose module differs from rank 0's ran: ${err}")
endif()
expect_in(other_module "scenario or model differs from rank 0's" "${err}")
expect_in(other_module_size "model.pt: 853120 parameters" "${err}")
expect_in(rank0_module_size "model.pt: 842496 parameters" "${err}")
if(EXISTS ${WORK}/a/out/two/ddp/metrics.jsonl)
  message(FATAL_ERROR "rank 0 trained beside a worker whose module differs")
endif()

# The resolved scenario of a module names only the keys that apply to it and records the file's
# digest: it reads back as it is, `--seeds` runs each seed from it, and once the module is exported
# again, the finished folder is not taken for the new module's results.
file(COPY_FILE ${MODELS}/gru.pt ${WORK}/mine.pt)
write_scenario(mine mine.pt "" "[ddp, diloco-h4]")
run_ok(seeds ${NARROWS} run mine.yaml -q --seeds 2 -o runs/mine)
run_ok(resolved ${NARROWS} validate runs/mine/scenario.yaml)
file(READ ${WORK}/runs/mine/scenario.yaml resolved)
expect_in(resolved_digest "torchscript_digest:" "${resolved}")
if(resolved MATCHES "preset:|d_model:")
  message(FATAL_ERROR "the resolved scenario of a module spells the built-in GPT's shape:\n${resolved}")
endif()
file(COPY_FILE ${MODELS}/gpt.pt ${WORK}/mine.pt)
execute_process(COMMAND ${NARROWS} run mine.yaml -q --seeds 2 -o runs/mine RESULT_VARIABLE rc ERROR_VARIABLE err
                WORKING_DIRECTORY ${WORK})
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "a folder of another module's results: exit ${rc}, not 2: ${err}")
endif()
expect_in(reexported "model.torchscript_digest is " "${err}")
