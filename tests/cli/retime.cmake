# A sweep whose points differ only in network keys, with modelled compute, trains its first point
# and times the others with that training's losses. The re-timed points must equal a sweep that
# trains every point (--no-retime): every entry's time, bytes, losses and figures at equal loss,
# exactly. An entry that cannot be re-timed (asynchronous outer updates) trains, and says why; a
# point whose scenario differs in another key is not re-timed. Run by ctest as `cmake -P` with
# NARROWS and WORK set.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
string(REPEAT "the quick brown fox jumps over the lazy dog. " 400 corpus)
file(WRITE ${WORK}/corpus.txt "${corpus}")
# DDP (gradient buckets started during backward), DiLoCo with int4 outer gradients, Streaming with
# overlap, NoLoCo's gossip and asynchronous DiLoCo; worker 3 at half speed leaves at step 5. DiPaCo,
# which takes no faults, below.
file(WRITE ${WORK}/n.yaml "name: n\nmodel: {preset: nano}\ndata: {path: corpus.txt}\n"
     "workers: {count: 4, speed: [1, 1, 1, 0.5]}\ncompute: {mode: modelled}\n"
     "train: {steps: 8, batch_size: 2, warmup_steps: 2}\neval: {every: 4, batches: 1, batch_size: 2}\n"
     "faults: [{type: leave, worker: 3, at_step: 5}]\n"
     "compare:\n  - ddp\n  - {name: diloco-int4, algorithm: diloco, inner_steps: 2, outer_gradient: {format: int4}}\n"
     "  - {name: streaming, algorithm: streaming-diloco, inner_steps: 4, fragments: 2, overlap_steps: 1}\n"
     "  - {name: noloco, algorithm: noloco, inner_steps: 2}\n"
     "  - {name: async, algorithm: async-diloco, inner_steps: 2}\n"
     "output: {dir: out}\n")

macro(narrows name)
  execute_process(COMMAND ${NARROWS} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK})
  set(what "${name}: narrows ${ARGN}: exit ${rc}\nstdout: ${out}\nstderr: ${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}")
  endif()
endmacro()
function(expect_text text)
  string(FIND "${out}${err}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "lacks '${text}':\n${what}")
  endif()
endfunction()

# One thread everywhere: --jobs 2 would give each point one, and float sums differ with the thread count.
set(grid --grid network.profile=home-100m,internet-1g,region-10g --set threads=1)
narrows(retimed sweep n.yaml ${grid} -q -o retimed --jobs 2)
expect_text("compute is modelled and 2 of 3 points differ from an earlier one in network keys alone")
narrows(trained sweep n.yaml ${grid} -q -o trained --no-retime)

# Every figure of every entry at the re-timed points equals the trained sweep's.
foreach(point profile-internet-1g profile-region-10g)
  file(READ ${WORK}/retimed/${point}/summary.json a)
  file(READ ${WORK}/trained/${point}/summary.json b)
  string(JSON n LENGTH "${b}" results)
  math(EXPR last "${n} - 1")
  foreach(i RANGE ${last})
    string(JSON name GET "${b}" results ${i} name)
    foreach(key final_val_loss time_s time_to_target_s bytes_sent_per_worker bytes_to_target compute_utilization
                outer_syncs speedup_at_target)
      string(JSON x ERROR_VARIABLE missing GET "${a}" results ${i} ${key})
      string(JSON y ERROR_VARIABLE missing GET "${b}" results ${i} ${key})
      if(NOT x STREQUAL y)
        message(FATAL_ERROR "${point} ${name} ${key}: re-timed ${x}, trained ${y}")
      endif()
    endforeach()
    # Its events (times, and what each reports) and its metrics, line for line.
    foreach(file events.jsonl metrics.jsonl)
      file(READ ${WORK}/retimed/${point}/${name}/${file} x)
      file(READ ${WORK}/trained/${point}/${name}/${file} y)
      if(NOT x STREQUAL y)
        message(FATAL_ERROR "${point} ${name}: ${file} differs between the re-timed and the trained sweep")
      endif()
    endforeach()
    string(JSON from ERROR_VARIABLE not_retimed GET "${a}" results ${i} retimed_from)
    if(name STREQUAL "async")
      if(NOT not_retimed)
        message(FATAL_ERROR "${point}: the asynchronous entry was re-timed: ${a}")
      endif()
    elseif(not_retimed)
      message(FATAL_ERROR "${point} ${name} was trained, not re-timed (${not_retimed})")
    endif()
  endforeach()
endforeach()
file(READ ${WORK}/retimed/profile-region-10g.log log)
foreach(text "async: trained, not re-timed" "its server applies outer gradients in the order they arrive"
             "re-timed: ddp, diloco-int4, streaming, noloco trained once, in retimed/profile-home-100m")
  string(FIND "${log}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "the re-timed point's table lacks '${text}':\n${log}")
  endif()
endforeach()

# Over seeds, each seed of a point takes the same seed's training; DiPaCo's paths too. With another
# axis that is not the network's, each of its values trains once.
narrows(seeds sweep n.yaml --grid network.profile=home-100m,region-10g --grid train.lr=0.003,0.001 -q -o seeds
        --seeds 2 --set faults=[]
        "--set=compare=[ddp, {name: dipaco, algorithm: dipaco, inner_steps: 2, levels: 1, modules: 2}]")
expect_text("re-timed: ddp, dipaco trained once, in seeds/profile-home-100m_lr-0.003")
expect_text("re-timed: ddp, dipaco trained once, in seeds/profile-home-100m_lr-0.001")

# A run whose scenario differs from the trained one in more than network keys is trained.
narrows(other run n.yaml -q -o other --set train.lr=0.001 --set threads=1 --retime-from retimed/profile-home-100m)
expect_text("ddp: trained, not re-timed: train.lr differs from retimed/profile-home-100m's")
