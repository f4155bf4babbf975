# The deployment end to end: workers as processes on loopback, data over the bulk plane (the
# default) beside ZeroMQ, or over ZeroMQ alone.
#  - the same scenario and seed give the same losses and bytes as in the emulator, either way;
#  - a DiLoCo worker killed with SIGKILL is detected and the survivors finish; DDP stops if told to;
#  - (a restarted worker rejoining: rejoin.cmake);
#  - a run resumed from a checkpoint continues exactly as the uninterrupted run;
#  - rank and world come from torchrun's, Slurm's and Open MPI's variables, with clear errors.
# Run by ctest as `cmake -P` with NARROWS, SRC and WORK set.
include(${SRC}/tests/cli/deploy_corpus.cmake)

string(CONCAT common "seed: 3\nthreads: 1\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
           "train: {steps: 24, batch_size: 4, warmup_steps: 4}\neval: {every: 8, batches: 2, batch_size: 4}\n"
           "compute: {mode: modelled, device_flops: 1e9}\n")

include(${SRC}/tests/cli/deploy_common.cmake)

# 1. The default deployment (CURVE, with a key the launcher makes: ZeroMQ's control plane and the
# bulk plane sealed, one connection a peer) equals the emulator, bit for bit.
file(WRITE ${WORK}/eq.yaml "name: eq\n${common}workers: {count: 3}\noutput: {dir: out, log_every: 1}\n"
     "compare: [ddp, {algorithm: ddp, name: ddp-flat, overlap: false}, diloco-h8,\n"
     "  {algorithm: streaming-diloco, name: streaming-int8, inner_steps: 8, fragments: 2, overlap_steps: 1,\n"
     "   outer_gradient: int8}]\n")
run_ok(emulated ${NARROWS} run eq.yaml -q --set output.dir=emu)
run_ok(launch ${NARROWS} launch --local 3 eq.yaml -q)
expect_in(launch_table "measured wall-clock time over loopback relative to ddp" "${out}")
expect_in(launch_loopback "over loopback: the scenario's network (" "${out}")
# The scenario's leave and join faults, honoured by real processes as the emulator does: worker 1
# leaves at step 5 and is due back at 17, worker 2 joins at 9 (DiLoCo takes each at its next round's
# start). The same losses as the emulator, step by step; the same leave and join events. What real
# processes cannot honour is refused before anything starts.
set(faults "faults=[{type: leave, worker: 1, at_step: 5}, {type: join, worker: 1, at_step: 17}, {type: join, worker: 2, at_step: 9}]")
set(fault_entries "compare=[ddp, diloco-h8, {algorithm: streaming-diloco, name: streaming, inner_steps: 8, fragments: 2}]")
run_ok(emulated_faults ${NARROWS} run eq.yaml -q --set "${faults}" --set "${fault_entries}" -o emu/faults)
# A deployment's results never go beside the emulator's in one folder (nor the other way round).
execute_process(COMMAND ${NARROWS} launch eq.yaml -q --set "${faults}" --set "${fault_entries}" -o emu/faults
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
expect_in(launch_into_emulated "emu/faults holds the emulator's (narrows run) results of this scenario" "${err}")
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "launch into an emulated run's folder: exit ${rc}\n${err}")
endif()
run_ok(launch_faults ${NARROWS} launch eq.yaml -q --set "${faults}" --set "${fault_entries}" -o out/faults)
execute_process(COMMAND ${NARROWS} run eq.yaml -q --set "${faults}" --set "${fault_entries}" -o out/faults
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
expect_in(run_into_launched "out/faults holds a deployment's (narrows launch) results of this scenario" "${err}")
foreach(entry ddp diloco-h8 streaming)
  # The bytes differ by the welcomes (8 (2 + workers) bytes each), which the emulator does not send.
  expect_same_metrics(faults_${entry} ${WORK}/emu/faults/${entry}/metrics.jsonl ${WORK}/out/faults/${entry}/metrics.jsonl
                      0 train_loss)
  file(READ ${WORK}/out/faults/${entry}/events.jsonl events)
  expect_in(faults_${entry}_leave [=["step":5,]=] "${events}")
  expect_in(faults_${entry}_leave [=["type":"leave","worker":1}]=] "${events}")
endforeach()
file(READ ${WORK}/out/faults/ddp/events.jsonl events)
expect_in(faults_ddp_join [=["step":9,]=] "${events}")
expect_in(faults_ddp_rejoin [=["step":17,]=] "${events}")
execute_process(COMMAND ${NARROWS} launch eq.yaml -q --set "faults=[{type: link_down, link: 'worker:1', from_s: 1, to_s: 2}]"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
expect_in(launch_link_down "faults[0]: a link_down fault is the emulator's" "${err}")
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "launch with a link_down fault: exit ${rc}
${err}")
endif()
execute_process(COMMAND ${NARROWS} launch eq.yaml -q
                --set "faults=[{type: crash, worker: 1, at_step: 3}, {type: join, worker: 1, at_step: 9}]"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
expect_in(launch_crash_join "faults[1]: worker 1 joins after a crash fault ended its process" "${err}")
execute_process(COMMAND ${NARROWS} launch eq.yaml -q --set "workers.speed=[1, 2, 1]"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK})
expect_in(launch_fast "workers.speed[1]: 2 is faster than the host" "${err}")
run_ok(paced ${NARROWS} launch eq.yaml -q --set "workers.speed=[1, 0.25, 1]" --set "compare=[ddp]" -o out/paced)
file(READ ${WORK}/out/paced/summary.json paced)
string(JSON paced_compute GET "${paced}" results 0 compute_utilization)
if(paced_compute GREATER 1.0)
  message(FATAL_ERROR "a paced worker's compute exceeds the run: ${paced_compute}")
endif()
file(STRINGS ${WORK}/out/paced/ddp/metrics.jsonl paced_lines)
list(GET paced_lines -1 paced_last)
string(JSON slow_compute GET "${paced_last}" workers 1 compute_s)
string(JSON slow_time GET "${paced_last}" workers 1 time_s)
if(slow_compute GREATER slow_time)
  message(FATAL_ERROR "the quarter-speed worker computed ${slow_compute} s in ${slow_time} s: not paced")
endif()
# Every entry of run `run` (out/<run>) equals the emulator's (emu/eq) bit for bit: metrics and bytes.
# Streaming DiLoCo with int8 outer gradients overlapped with an inner step: the same losses; the bytes
# a line reports depend on how far the overlapped all-reduce got, so only the totals must agree.
function(expect_as_emulated run over)
  foreach(entry ddp ddp-flat diloco-h8)
    expect_same_metrics(${run}_${entry} ${WORK}/emu/eq/${entry}/metrics.jsonl ${WORK}/out/${run}/${entry}/metrics.jsonl 0)
  endforeach()
  expect_same_metrics(${run}_streaming ${WORK}/emu/eq/streaming-int8/metrics.jsonl
                      ${WORK}/out/${run}/streaming-int8/metrics.jsonl 0 train_loss)
  file(READ ${WORK}/emu/eq/summary.json emu_summary)
  file(READ ${WORK}/out/${run}/summary.json summary)
  foreach(i 0 1 2 3)
    string(JSON emu_bytes GET "${emu_summary}" results ${i} bytes_sent_per_worker)
    string(JSON real_bytes GET "${summary}" results ${i} bytes_sent_per_worker)
    if(NOT emu_bytes STREQUAL real_bytes)
      message(FATAL_ERROR "entry ${i}: ${emu_bytes} bytes per worker emulated, ${real_bytes} over ${over}")
    endif()
  endforeach()
endfunction()
expect_as_emulated(eq "CURVE over ZeroMQ")
file(READ ${WORK}/out/eq/summary.json summary)
string(JSON clock GET "${summary}" clock)
if(NOT clock STREQUAL "wall")
  message(FATAL_ERROR "summary.json of a deployment says clock ${clock}")
endif()
if(NOT EXISTS ${WORK}/out/eq/cluster.key)
  message(FATAL_ERROR "launch --local made no key for CURVE")
endif()

# 1c. The data over ZeroMQ under CURVE instead, and over the bulk plane with 2 connections per peer
# (the plain plane runs in the chaos test): the same losses and bytes as the emulator, bit for bit.
run_ok(zeromq ${NARROWS} launch --local 3 eq.yaml -q --set name=eqzmq --set deploy.bulk_streams=0)
expect_as_emulated(eqzmq "CURVE over ZeroMQ")
run_ok(bulk ${NARROWS} launch --local 3 eq.yaml -q --set name=eqbulk --set deploy.bulk_streams=2)
expect_as_emulated(eqbulk "the bulk plane, 2 connections")

# 1b. Through the link emulator (each worker in a network namespace, home-100m's 30 ms between them):
# the same losses as the emulator, a DDP run slowed by the latency its all-reduces cross, and the
# links' statistics. Needs root and /dev/net/tun; said and skipped otherwise.
execute_process(COMMAND ${NARROWS} launch --local 3 eq.yaml -q --network home-100m --packet-log --set name=eqnet
                --set "compare=[ddp, diloco-h8]" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                WORKING_DIRECTORY ${WORK} TIMEOUT 300)
string(FIND "${err}" "the link emulator needs network namespaces" unprivileged)
if(NOT unprivileged EQUAL -1)
  message(STATUS "link emulator case skipped: ${err}")
else()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "launch --network: exit ${rc}\n${out}${err}")
  endif()
  foreach(entry ddp diloco-h8)
    expect_same_metrics(linkemu_${entry} ${WORK}/emu/eq/${entry}/metrics.jsonl ${WORK}/out/eqnet/${entry}/metrics.jsonl 0
                        train_loss)
  endforeach()
  file(READ ${WORK}/out/eqnet/summary.json net_summary)
  string(JSON ddp_s GET "${net_summary}" results 0 time_s)
  # 24 steps of a 3-worker ring: 4 latencies of 30 ms each at least, 2.9 s; loopback takes ~0.2 s.
  if(ddp_s LESS 2.5)
    message(FATAL_ERROR "DDP through 30 ms links took ${ddp_s} s")
  endif()
  file(READ ${WORK}/out/eqnet/links.json links)
  string(JSON up0 GET "${links}" links 0 bytes)
  if(up0 LESS 1000000)
    message(FATAL_ERROR "link up:0 carried ${up0} bytes")
  endif()
  expect_in(linkemu_prediction "predicted (s)" "${out}")
  # --packet-log: every packet's fate per link, as many packets sent on up:0 as links.json counts.
  file(STRINGS ${WORK}/out/eqnet/packets.csv up0_sent REGEX "^[0-9.]+,up:0,0,[12],[0-9]+,[0-9]+,sent,")
  list(LENGTH up0_sent up0_sent_n)
  string(JSON up0_packets GET "${links}" links 0 packets)
  if(NOT up0_sent_n EQUAL up0_packets)
    message(FATAL_ERROR "packets.csv: ${up0_sent_n} packets sent on up:0, links.json: ${up0_packets}")
  endif()
endif()

# 1d. docs/how-to/deploy.md's recipe across machines: each rank's `narrows worker` in a namespace of its own
# (an address of its own, as on a machine of its own) with --master and --key alone, its sockets
# bound on every interface (`tools/netns --unbound`). The hello each worker sends its peers names it
# as the rendezvous table does, not as bound (0.0.0.0, which elsewhere names the other machine
# itself): the same losses and bytes as the emulator, over ZeroMQ and over the bulk plane. Needs
# root and `ip netns` (a namespace made and entered: in a chroot whose / is no mount point
# `ip netns exec` fails); said and skipped otherwise.
execute_process(COMMAND id -u OUTPUT_VARIABLE uid OUTPUT_STRIP_TRAILING_WHITESPACE)
set(netns_probe narrows-hosts-probe)
execute_process(COMMAND ip netns add ${netns_probe} RESULT_VARIABLE no_netns ERROR_VARIABLE netns_err)
if(no_netns EQUAL 0)
  execute_process(COMMAND ip netns exec ${netns_probe} true RESULT_VARIABLE no_netns ERROR_VARIABLE netns_err)
endif()
execute_process(COMMAND ip netns del ${netns_probe} RESULT_VARIABLE ignored ERROR_QUIET)
if(NOT uid STREQUAL "0" OR NOT no_netns EQUAL 0)
  message(STATUS "workers on separate hosts skipped: tools/netns needs root and `ip netns` (${netns_err})")
else()
  run_ok(hosts_key ${NARROWS} keygen hosts.key)
  foreach(plane 0 1)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env NARROWS=${NARROWS} bash ${SRC}/tools/netns --rate 1000 --unbound eq.yaml
                            --key hosts.key --set name=eqhosts${plane} --set deploy.bulk_streams=${plane}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 300)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "workers on separate hosts (bulk_streams ${plane}): exit ${rc}\n${out}${err}")
    endif()
    expect_as_emulated(eqhosts${plane} "separate hosts (bulk_streams ${plane})")
  endforeach()
endif()

# 2. A DiLoCo worker killed with SIGKILL: detected by heartbeat, the survivors finish.
file(WRITE ${WORK}/crash.yaml "name: crash\n${common}workers: {count: 4}\noutput: {dir: out, log_every: 4}\n"
     "deploy: {security: plain, heartbeat_s: 0.1, timeout_s: 1.0}\n"
     "faults: [{type: crash, worker: 2, at_step: 12}]\ncompare: [diloco-h8]\n")
run_ok(crash ${NARROWS} launch --local 4 crash.yaml -q)
expect_in(crash_reported "worker 2 was killed by signal 9" "${out}")
file(READ ${WORK}/out/crash/diloco-h8/events.jsonl events)
expect_in(crash_event "\"survivors\":[0,1,3],\"time\"" "${events}")
expect_in(crash_event_worker "\"type\":\"crash\",\"worker\":2" "${events}")
expect_in(survivors_sync "\"participants\":[0,1,3],\"step\":24" "${events}")
file(STRINGS ${WORK}/out/crash/diloco-h8/metrics.jsonl lines)
list(GET lines -1 last)
string(JSON step GET "${last}" step)
if(NOT step EQUAL 24)
  message(FATAL_ERROR "the survivors stopped at step ${step}")
endif()
# The deployment's report: measured time, the crash on the timeline.
run_ok(crash_report ${NARROWS} report out/crash)
file(READ ${WORK}/out/crash/report.html html)
expect_in(report_clock "measured wall-clock time (s)" "${html}")
expect_in(report_crash "\"crash\"]" "${html}")

# 2b. Asynchronous outer updates deployed. One worker (its server beside it) equals the emulator
# bit for bit; with three, arrival order is the network's, and worker 2 killed with SIGKILL drops out
# of the server's expectations: the survivors spend the whole budget (3 * 24 / 8 updates).
file(WRITE ${WORK}/async1.yaml "name: async1\n${common}workers: {count: 1}\noutput: {dir: out, log_every: 1}\n"
     "deploy: {security: plain}\ncompare: [async-diloco-h8]\n")
run_ok(async_emulated ${NARROWS} run async1.yaml -q --set output.dir=emu)
run_ok(async_launch ${NARROWS} launch --local 1 async1.yaml -q)
expect_same_metrics(equality_async ${WORK}/emu/async1/async-diloco-h8/metrics.jsonl
                    ${WORK}/out/async1/async-diloco-h8/metrics.jsonl 0)
# DiPaCo (a module per level averaged among its two holders) and adaptive batch sizes (DDP's norm
# test across workers, DiLoCo's on each worker's halves) deployed: the emulator's numbers.
file(WRITE ${WORK}/family.yaml "name: family\n${common}workers: {count: 4}\noutput: {dir: out, log_every: 1}\n"
     "deploy: {security: plain}\ncompare: [{name: dp, algorithm: dipaco, inner_steps: 8, document_tokens: 256},\n"
     "  {name: nt, algorithm: ddp, batch: {schedule: norm-test, eta: 0.05, test_every: 2, max_multiple: 4}},\n"
     "  {name: dn, algorithm: diloco, inner_steps: 8, batch: {schedule: norm-test, eta: 0.05, test_every: 2}}]\n")
run_ok(family_emulated ${NARROWS} run family.yaml -q --set output.dir=emu)
run_ok(family_launch ${NARROWS} launch --local 4 family.yaml -q)
expect_same_metrics(equality_dipaco ${WORK}/emu/family/dp/metrics.jsonl ${WORK}/out/family/dp/metrics.jsonl 0)
foreach(entry nt dn)
  expect_same_metrics(equality_${entry} ${WORK}/emu/family/${entry}/metrics.jsonl ${WORK}/out/family/${entry}/metrics.jsonl 0
                      train_loss bytes_sent global_batch)
endforeach()
file(STRINGS ${WORK}/emu/family/dp/metrics.jsonl emu_lines)
file(STRINGS ${WORK}/out/family/dp/metrics.jsonl live_lines)
list(GET emu_lines -1 emu_last)
list(GET live_lines -1 live_last)
string(JSON emu_val GET "${emu_last}" val_loss)
string(JSON live_val GET "${live_last}" val_loss)
if(NOT emu_val STREQUAL live_val)
  message(FATAL_ERROR "dipaco's path-weighted validation loss: ${emu_val} emulated, ${live_val} deployed")
endif()
# 2c. The 2025-26 methods deployed, four processes: SparseLoCo (chunked top-k, 2-bit values,
# decaying error feedback), eager outer updates, NoLoCo's gossip and Muon inner steps give the
# emulator's numbers bit for bit, and each, resumed from a checkpoint, continues exactly as the
# uninterrupted run (error-feedback residuals, eager's last pseudo-gradients, gossip's momentum and
# Muon's state are in the checkpoint).
file(WRITE ${WORK}/new.yaml "name: new\n${common}workers: {count: 4}\noutput: {dir: out, log_every: 1}\n"
     "deploy: {security: plain, checkpoint_every: 1}\ncompare: [sparseloco-h8, eager-diloco-h8, noloco-h8]\n")
run_ok(new_emulated ${NARROWS} run new.yaml -q --set output.dir=emu)
run_ok(new_launch ${NARROWS} launch --local 4 new.yaml -q)
run_ok(muon_emulated ${NARROWS} run new.yaml -q --set output.dir=emu --set name=muon --set train.optimizer=muon
       --set "compare=[diloco-h8]")
run_ok(muon_launch ${NARROWS} launch --local 4 new.yaml -q --set name=muon --set train.optimizer=muon
       --set "compare=[diloco-h8]")
foreach(run new/sparseloco-h8 new/noloco-h8 muon/diloco-h8)
  expect_same_metrics(equality_${run} ${WORK}/emu/${run}/metrics.jsonl ${WORK}/out/${run}/metrics.jsonl 0)
endforeach()
# Eager's all-reduce runs beside a whole round: the same losses, the bytes a line reports depend on
# how far it got.
expect_same_metrics(equality_eager ${WORK}/emu/new/eager-diloco-h8/metrics.jsonl
                    ${WORK}/out/new/eager-diloco-h8/metrics.jsonl 0 train_loss)
set(muon_muon --set train.optimizer=muon --set compare=[diloco-h8])
foreach(run new/sparseloco-h8 new/eager-diloco-h8 new/noloco-h8 muon/diloco-h8)
  string(REPLACE "/" "-" slug ${run})
  file(COPY_FILE ${WORK}/out/${run}/metrics.jsonl ${WORK}/uninterrupted-${slug}.jsonl)
  string(REGEX REPLACE "/.*" "" run_name ${run})
  run_ok(resumed_${slug} ${NARROWS} launch --local 4 new.yaml -q --set name=${run_name}
         --resume out/${run}/checkpoints/step-000016 ${muon_${run_name}})
  expect_same_metrics(resume_${slug} ${WORK}/uninterrupted-${slug}.jsonl ${WORK}/out/${run}/metrics.jsonl 0 train_loss)
endforeach()
file(WRITE ${WORK}/async3.yaml "name: async3\n${common}workers: {count: 3}\noutput: {dir: out, log_every: 4}\n"
     "deploy: {security: plain, heartbeat_s: 0.1, timeout_s: 1.0}\n"
     "faults: [{type: crash, worker: 2, at_step: 12}]\n"
     "compare: [{algorithm: async-diloco, inner_steps: 8, outer_lr: 0.35, name: async}]\n")
run_ok(async_crash ${NARROWS} launch --local 3 async3.yaml -q)
expect_in(async_crash_reported "worker 2 was killed by signal 9" "${out}")
file(READ ${WORK}/out/async3/async/events.jsonl events)
expect_in(async_crash_event "\"type\":\"crash\",\"worker\":2" "${events}")
file(READ ${WORK}/out/async3/summary.json summary)
string(JSON syncs GET "${summary}" results 0 outer_syncs)
if(NOT syncs EQUAL 9)
  message(FATAL_ERROR "async deployed with a crash: ${syncs} updates applied, expected 9")
endif()
string(JSON val GET "${summary}" results 0 final_val_loss)
if(val GREATER 5.6)
  message(FATAL_ERROR "async deployed: final validation loss ${val}")
endif()

# 3. DDP told to stop: a clear error, exit 1, the steps before the crash kept.
execute_process(COMMAND ${NARROWS} launch --local 4 crash.yaml -q --set "compare=[ddp]" --set deploy.on_failure=stop
                --set name=stop RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK}
                TIMEOUT 120)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "ddp with on_failure stop: exit ${rc}\n${out}${err}")
endif()
# Worker 2 is killed as it starts step 12; if its transport had not sent its last messages of step 11
# when SIGKILL came, a survivor still inside step 11 sees it die there (both are true reports).
string(REGEX MATCH "worker 2 died at step 1[12]; stopping \\(deploy.on_failure: stop\\)" stop_message "${err}")
if(NOT stop_message)
  message(FATAL_ERROR "stop_message: lacks 'worker 2 died at step 11 or 12; stopping' in:\n${err}")
endif()
file(STRINGS ${WORK}/out/stop/ddp/metrics.jsonl lines)
list(LENGTH lines kept)
if(kept LESS 3)
  message(FATAL_ERROR "ddp stopped without its metrics: ${kept} lines")
endif()

# 4. A restarted worker rejoining: tests/cli/rejoin.cmake (ctest cli_rejoin), so that it can be repeated.

# 5. Resumed from a checkpoint, the run continues exactly as the uninterrupted one.
file(WRITE ${WORK}/ck.yaml "name: ck\n${common}workers: {count: 3}\noutput: {dir: out, log_every: 1}\n"
     "deploy: {security: plain, checkpoint_every: 1}\n"
     "compare: [{algorithm: diloco, inner_steps: 8, outer_optimizer: adam, outer_lr: 0.1, name: dl}]\n")
run_ok(checkpointed ${NARROWS} launch --local 3 ck.yaml -q)
file(COPY_FILE ${WORK}/out/ck/dl/metrics.jsonl ${WORK}/uninterrupted.jsonl)
run_ok(resumed ${NARROWS} launch --local 3 ck.yaml -q --resume out/ck/dl/checkpoints/step-000016)
expect_same_metrics(resume ${WORK}/uninterrupted.jsonl ${WORK}/out/ck/dl/metrics.jsonl 0)
# Killed whole (every process SIGKILLed, as by a lost machine, their spools left behind) after the
# step-16 checkpoint, and resumed from it: what the dead processes recorded past the checkpoint was
# done again, and what they recorded before it the checkpoint holds, so neither counts twice: the
# same losses, bytes and tokens as the uninterrupted run. Paced (workers.speed) so that the kill
# lands mid-run.
execute_process(COMMAND sh -c "setsid '${NARROWS}' launch --local 3 ck.yaml -q --set name=ckk --set 'workers.speed=[0.3, 0.3, 0.3]' > /dev/null 2>&1 &
    pid=$!
    c=out/ckk/dl/checkpoints/step-000016
    for i in $(seq 1 1500); do [ -f $c/rank-0.ckpt ] && [ -f $c/rank-1.ckpt ] && [ -f $c/rank-2.ckpt ] && break; sleep 0.02; done
    kill -KILL -$pid; wait $pid; exit 0" WORKING_DIRECTORY ${WORK})
run_ok(resumed_after_kill ${NARROWS} launch --local 3 ck.yaml -q --set name=ckk --set "workers.speed=[0.3, 0.3, 0.3]"
       --resume out/ckk/dl/checkpoints/step-000016)
file(READ ${WORK}/out/ckk/dl/events.jsonl events)
expect_in(resumed_after_kill_gathered "\"type\":\"gathered_spool\"" "${events}")
expect_same_metrics(resume_after_kill ${WORK}/uninterrupted.jsonl ${WORK}/out/ckk/dl/metrics.jsonl 0 train_loss bytes_sent
                    tokens)
# DDP (a checkpoint every 8 steps) and DiPaCo resume the same way.
file(WRITE ${WORK}/ck2.yaml "name: ck2\n${common}workers: {count: 4}\noutput: {dir: out, log_every: 1}\n"
     "deploy: {security: plain, checkpoint_every: 8}\n"
     "compare: [ddp, {name: dp, algorithm: dipaco, inner_steps: 8, document_tokens: 256}]\n")
run_ok(checkpointed_ddp ${NARROWS} launch --local 4 ck2.yaml -q --set "compare=[ddp]")
run_ok(checkpointed_dipaco ${NARROWS} launch --local 4 ck2.yaml -q --set deploy.checkpoint_every=1
       --set "compare=[{name: dp, algorithm: dipaco, inner_steps: 8, document_tokens: 256}]")
foreach(entry ddp dp)
  file(COPY_FILE ${WORK}/out/ck2/${entry}/metrics.jsonl ${WORK}/uninterrupted-ck2-${entry}.jsonl)
endforeach()
run_ok(resumed_ddp ${NARROWS} launch --local 4 ck2.yaml -q --set "compare=[ddp]" --resume out/ck2/ddp/checkpoints/step-000016)
run_ok(resumed_dipaco ${NARROWS} launch --local 4 ck2.yaml -q --set deploy.checkpoint_every=1
       --set "compare=[{name: dp, algorithm: dipaco, inner_steps: 8, document_tokens: 256}]"
       --resume out/ck2/dp/checkpoints/step-000016)
foreach(entry ddp dp)
  expect_same_metrics(resume_${entry} ${WORK}/uninterrupted-ck2-${entry}.jsonl ${WORK}/out/ck2/${entry}/metrics.jsonl 0)
endforeach()
# Streaming DiLoCo (its fragments' schedule and outer state; int8 outer gradients with error
# feedback, so the residuals too) and NoLoCo (anchors and velocities) resume the same way.
file(WRITE ${WORK}/ck3.yaml "name: ck3\n${common}workers: {count: 3}\noutput: {dir: out, log_every: 1}\n"
     "deploy: {security: plain, checkpoint_every: 1}\n"
     "compare: [{name: sd, algorithm: streaming-diloco, inner_steps: 8, fragments: 2, overlap_steps: 0,\n"
     "           outer_gradient: {format: int8, error_feedback: true}}, {name: nl, algorithm: noloco, inner_steps: 8}]\n")
foreach(entry sd nl)
  run_ok(checkpointed_${entry} ${NARROWS} launch --local 3 ck3.yaml -q --entry ${entry})
  file(COPY_FILE ${WORK}/out/ck3/${entry}/metrics.jsonl ${WORK}/uninterrupted-ck3-${entry}.jsonl)
  run_ok(resumed_${entry} ${NARROWS} launch --local 3 ck3.yaml -q --entry ${entry}
         --resume out/ck3/${entry}/checkpoints/step-000016)
  expect_same_metrics(resume_${entry} ${WORK}/uninterrupted-ck3-${entry}.jsonl ${WORK}/out/ck3/${entry}/metrics.jsonl 0)
endforeach()
# Async DiLoCo: a checkpoint holds the server (worker 0 writes it, every 8 steps of progress);
# resumed, the server goes on from it and every worker joins it. Arrival order is the network's, so
# no two runs are equal: the resumed run has the checkpoint's 6 updates and the 3 the budget had left.
file(WRITE ${WORK}/ck4.yaml "name: ck4\n${common}workers: {count: 3}\noutput: {dir: out, log_every: 1}\n"
     "deploy: {security: plain, checkpoint_every: 1}\ncompare: [{name: as, algorithm: async-diloco, inner_steps: 8}]\n")
run_ok(checkpointed_async ${NARROWS} launch --local 3 ck4.yaml -q)
foreach(step 000008 000016)
  if(NOT EXISTS ${WORK}/out/ck4/as/checkpoints/step-${step}/rank-0.ckpt)
    message(FATAL_ERROR "async: no server checkpoint at step ${step}")
  endif()
endforeach()
run_ok(resumed_async ${NARROWS} launch --local 3 ck4.yaml -q --resume out/ck4/as/checkpoints/step-000016)
file(STRINGS ${WORK}/out/ck4/as/events.jsonl joins REGEX "\"step\":16,[^\n]*\"type\":\"join\"")
file(STRINGS ${WORK}/out/ck4/as/events.jsonl updates REGEX "\"type\":\"outer_sync\"")
file(READ ${WORK}/out/ck4/as/events.jsonl events)
list(LENGTH joins njoins)
list(LENGTH updates nupdates)
if(NOT njoins EQUAL 3 OR NOT nupdates EQUAL 9)
  message(FATAL_ERROR "async resumed: ${njoins} joins at step 16 (expected 3), ${nupdates} updates (expected 9):\n${events}")
endif()
expect_in(async_resumed_version "\"version\":9" "${events}")
file(READ ${WORK}/out/ck/dl/checkpoints/step-000008/rank-1.ckpt ckpt HEX LIMIT 4)
if(NOT ckpt STREQUAL "4e525743")
  message(FATAL_ERROR "checkpoint magic: ${ckpt}")
endif()
file(WRITE ${WORK}/out/ck/dl/checkpoints/step-000008/rank-1.ckpt "NRWC garbage")
execute_process(COMMAND ${NARROWS} launch --local 3 ck.yaml -q --resume out/ck/dl/checkpoints/step-000008
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK} TIMEOUT 120)
expect_in(corrupt_checkpoint "rank-1.ckpt: " "${err}")

# 6. Placement from the launchers' variables; a world of one needs nobody else.
string(REPLACE "train: {steps: 24, batch_size: 4, warmup_steps: 4}\n" "" one_text "${common}")
file(WRITE ${WORK}/one.yaml "name: one\n${one_text}train: {steps: 2, batch_size: 2}\nworkers: {count: 1}\n"
     "output: {dir: out}\ndeploy: {security: plain}\n")
string(RANDOM LENGTH 4 ALPHABET 123456789 port_offset)
math(EXPR port2 "20000 + ${port_offset} % 20000")
run_ok(torchrun ${CMAKE_COMMAND} -E env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=${port2}
       ${NARROWS} worker one.yaml -q --bind 127.0.0.1)
run_ok(slurm ${CMAKE_COMMAND} -E env SLURM_PROCID=0 SLURM_NTASKS=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=${port2}
       ${NARROWS} worker one.yaml -q --bind 127.0.0.1)
run_ok(openmpi ${CMAKE_COMMAND} -E env OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 ${NARROWS} worker one.yaml -q
       --bind 127.0.0.1 --master 127.0.0.1:${port2})

function(expect_failure name expected_text)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err WORKING_DIRECTORY ${WORK}
                  TIMEOUT 60)
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "${name}: exit ${rc}, expected 2\n${out}${err}")
  endif()
  expect_in(${name} "${expected_text}" "${out}${err}")
endfunction()
expect_failure(bad_rank "RANK=x is not a non-negative integer" ${CMAKE_COMMAND} -E env RANK=x WORLD_SIZE=1
               ${NARROWS} worker one.yaml --master 127.0.0.1:1)
expect_failure(no_rank "no rank: pass --rank, or set RANK" ${CMAKE_COMMAND} -E env --unset=RANK --unset=SLURM_PROCID
               --unset=OMPI_COMM_WORLD_RANK ${NARROWS} worker one.yaml --world 1 --master 127.0.0.1:1)
expect_failure(no_master "no rendezvous: pass --master" ${CMAKE_COMMAND} -E env --unset=MASTER_ADDR
               --unset=SLURM_STEP_NODELIST --unset=SLURM_JOB_NODELIST --unset=SLURM_NODELIST
               ${NARROWS} worker one.yaml --rank 0 --world 1)
expect_failure(world_mismatch "the world has 2 workers but the scenario's workers.count is 1" ${NARROWS} worker
               one.yaml --rank 0 --world 2 --master 127.0.0.1:1)
expect_failure(no_key "deploy.security is curve: give deploy.key_file or --key" ${NARROWS} worker one.yaml
               --rank 0 --world 1 --master 127.0.0.1:1 --set deploy.security=curve)
expect_failure(launch_count "launch --local 2 but the scenario's workers.count is 1" ${NARROWS} launch --local 2 one.yaml)
# A crash fault's worker stays dead: the entries after the first would run without it, compared as
# equals. Refused without a restart (one entry at a time, or --chaos).
expect_failure(launch_crash_entries "faults[0]: a crash ends worker 1's process, and the 2 entries after the first"
               ${NARROWS} launch eq.yaml -q --set "faults=[{type: crash, worker: 1, at_step: 3}]"
               --set "compare=[ddp, diloco-h8, diloco-h4]")
# A worker's rank 0 refuses a folder holding another scenario's results, as launch does.
expect_failure(worker_other_folder "out/one holds the results of another scenario: train.steps is 2 there and 3 here"
               ${NARROWS} worker one.yaml -q --set train.steps=3 --rank 0 --world 1 --master 127.0.0.1:${port2}
               --bind 127.0.0.1)
