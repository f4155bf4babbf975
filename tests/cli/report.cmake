# `narrows report`, `run --report`, `sweep --report` and `narrows fit`: the HTML file is written,
# self-contained, and draws every chart in a real browser (Debian's headless Chromium) without a
# console message; bad folders and files fail with the file and line, and lose nothing written.
# Run by ctest as `cmake -P` with NARROWS, CHROMIUM and WORK set.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
string(REPEAT "the quick brown fox jumps over the lazy dog. " 400 corpus)
file(WRITE ${WORK}/corpus.txt "${corpus}")
file(WRITE ${WORK}/s.yaml "name: s\nmodel: {preset: nano}\ndata: {path: corpus.txt}\nworkers: {count: 3}\n"
     "compute: {mode: modelled, device_flops: 1.0e9}\ntrain: {steps: 8, batch_size: 2}\neval: {every: 4, batches: 1, batch_size: 2}\n"
     "faults: [{type: leave, worker: 2, at_step: 4}, {type: join, worker: 2, at_step: 6}]\n"
     "compare: [ddp, {name: diloco-h2, inner_steps: 2, drop_probability: 0.5}]\noutput: {dir: out, log_every: 1}\n")

function(run_narrows)
  execute_process(COMMAND ${NARROWS} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "narrows ${ARGN}: exit ${rc}\n${out}${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

function(expect_failure name expected_text)
  execute_process(COMMAND ${NARROWS} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  WORKING_DIRECTORY ${WORK})
  string(FIND "${err}" "${expected_text}" at)
  if(NOT rc EQUAL 2 OR at EQUAL -1)
    message(FATAL_ERROR "${name}: exit ${rc}, expected 2 and '${expected_text}'\n${out}${err}")
  endif()
endfunction()

# Every marker after `what` must be in ${html} (the page read last).
function(expect_markers what)
  foreach(marker ${ARGN})
    string(FIND "${html}" "${marker}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "${what} lacks ${marker}")
    endif()
  endforeach()
endfunction()

# Opens `html` in headless Chromium; every chart must have laid out its points, there must be at
# least `min_charts` charts and `min_heatmaps` heat maps, and no console message and no error.
function(check_in_browser html min_charts min_heatmaps)
  execute_process(COMMAND ${CHROMIUM} --headless --no-sandbox --disable-gpu --user-data-dir=${WORK}/chromium
                          --enable-logging=stderr --v=0 --virtual-time-budget=10000 --dump-dom file://${WORK}/${html}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE dom ERROR_VARIABLE log TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${html}: chromium exit ${rc}\n${log}")
  endif()
  if(NOT dom MATCHES "<body data-charts=\"([0-9]+)\" data-rendered=\"([0-9]+)\" data-heatmaps=\"([0-9]+)\" data-errors=\"([0-9]+)\"")
    message(FATAL_ERROR "${html}: the page did not finish drawing:\n${dom}")
  endif()
  set(charts ${CMAKE_MATCH_1})
  set(rendered ${CMAKE_MATCH_2})
  set(heatmaps ${CMAKE_MATCH_3})
  set(errors ${CMAKE_MATCH_4})
  if(charts LESS min_charts OR NOT rendered EQUAL charts OR heatmaps LESS min_heatmaps OR NOT errors EQUAL 0)
    message(FATAL_ERROR "${html}: ${charts} charts (at least ${min_charts}), ${rendered} drawn, ${heatmaps} heat maps "
                        "(at least ${min_heatmaps}), ${errors} errors")
  endif()
  string(REGEX MATCHALL "[^\n]*:CONSOLE[^\n]*" console "${log}")
  if(console)
    message(FATAL_ERROR "${html}: console messages:\n${console}")
  endif()
  message(STATUS "${html}: ${charts} charts drawn, ${heatmaps} heat maps, no console message")
endfunction()

# run --report: the report beside the results, self-contained (no external script or style).
run_narrows(run s.yaml -q --report)
string(FIND "${out}" "report: out/s/report.html" at)
if(at EQUAL -1)
  message(FATAL_ERROR "run --report did not say where the report is:\n${out}")
endif()
file(READ ${WORK}/out/s/report.html html)
string(FIND "${html}" "Chart.js v3" inlined)
if(inlined EQUAL -1 OR html MATCHES "<script[^>]* src=" OR html MATCHES "<link ")
  message(FATAL_ERROR "report.html is not self-contained")
endif()
foreach(id val-loss-time val-loss-tokens bytes-time utilization timeline-0-0 timeline-0-1)
  string(FIND "${html}" "\"id\":\"${id}\"" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "report.html has no chart ${id}")
  endif()
endforeach()
# The network's per-link counters: links.json beside each entry, a table and a heat map.
if(NOT EXISTS ${WORK}/out/s/ddp/links.json)
  message(FATAL_ERROR "no links.json for the ddp entry")
endif()
file(READ ${WORK}/out/s/ddp/links.json links)
string(JSON first_link GET "${links}" links 0 link)
string(JSON first_bytes GET "${links}" links 0 bytes)
if(NOT first_link STREQUAL "up:0" OR first_bytes LESS_EQUAL 0)
  message(FATAL_ERROR "links.json: the first link is ${first_link} with ${first_bytes} bytes")
endif()
expect_markers("report.html (links)" "Busiest links of ddp" "Link utilisation of ddp")
expect_markers("report.html (timeline states, events, scenario)" "\"absent\"" "\"join\"" "\"outer sync\""
               "Scenario (resolved)")
# 6 comparison charts and a timeline per entry; a link heat map per entry.
check_in_browser(out/s/report.html 8 2)

# A corpus of two domains (a folder of folders), sampled by domain: the validation loss per domain
# and DiPaCo's routing by domain are tables of the run's section, and the log names the domains.
string(REPEAT "0123 4567 89 = 1234 + 5678. " 600 numbers)
file(WRITE ${WORK}/domains/letters/a.txt "${corpus}")
file(WRITE ${WORK}/domains/numbers/a.txt "${numbers}")
file(WRITE ${WORK}/d.yaml "name: d\nmodel: {preset: nano}\ndata: {path: domains, sampling: by-domain}\nworkers: {count: 2}\n"
     "compute: {mode: modelled, device_flops: 1.0e9}\ntrain: {steps: 4, batch_size: 2}\neval: {every: 2, batches: 2, batch_size: 2}\n"
     "compare: [ddp, {name: p, algorithm: dipaco, inner_steps: 2, levels: 1, modules: 2, document_tokens: 256, route_tokens: 32}]\n"
     "output: {dir: out}\n")
execute_process(COMMAND ${NARROWS} run d.yaml --seeds 2 --report RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                WORKING_DIRECTORY ${WORK})
if(NOT rc EQUAL 0 OR NOT err MATCHES "data: [0-9.]+M tokens in 2 domains: letters [0-9.]+M \\([0-9.]+M validation\\) numbers")
  message(FATAL_ERROR "a run on two domains: exit ${rc}, no line naming them\n${out}${err}")
endif()
# Over two seeds: each domain's mean and interval.
file(READ ${WORK}/out/d/summary.json summary)
string(JSON numbers_hw GET "${summary}" results 0 final_val_loss_by_domain_ci95 numbers)
if(NOT numbers_hw MATCHES "^[0-9.e+-]+$")
  message(FATAL_ERROR "summary.json over seeds: no interval for the numbers domain (${numbers_hw})")
endif()
file(READ ${WORK}/out/d/report.html html)
expect_markers("the two-domain report" "Final validation loss per domain" "Routing of p by domain" "training tokens"
               "validation windows")
check_in_browser(out/d/report.html 6 0)

# A sweep over bandwidth and model size: the heat map, the fit and its chart.
run_narrows(sweep s.yaml -q --report --grid network.profile=home-100m,internet-1g --grid model.d_model=16,32,48)
file(READ ${WORK}/out/s-sweep/report.html html)
expect_markers("sweep report" "Speed-up over ddp at equal loss: ddp's time to each point's target loss"
               "Speed-up over ddp at equal steps" "100 Mbit/s" "1 Gbit/s" "diloco-h2 (H=2)" "Scaling fit"
               "\"id\":\"fit-0\"" "\"id\":\"speedup-bw-0\"" "\"id\":\"loss-bytes-0\"" "speed-up vs ddp (equal loss)")
check_in_browser(out/s-sweep/report.html 4 2)
run_narrows(fit out/s-sweep)
if(NOT out MATCHES "ddp +6 +[0-9.e+-]+ ± [0-9.e+-]+ +-?[0-9.]+ ± [0-9.]+ +- ")
  message(FATAL_ERROR "narrows fit: no fit with uncertainties for ddp over N:\n${out}")
endif()

# The held-out test: the laws fitted on d_model 16 and 32, predicted at 48 against what ran there.
run_narrows(fit out/s-sweep --hold-out)
if(NOT out MATCHES "ddp +[0-9]+ +3 +[0-9.]+ +[0-9.]+-[0-9.]+ +[0-9.]+[^\n%]* [-+][0-9.]+%")
  message(FATAL_ERROR "narrows fit --hold-out: no held-out prediction for ddp:\n${out}")
endif()

# The decision from the sweep's laws (model size at 3 workers): a row per entry, the break-even,
# and its page drawn in the browser (the frontier and the break-even curves).
run_narrows(plan s.yaml --fit out/s-sweep --params 2e4)
if(NOT out MATCHES "ddp +3 +[0-9.]+ +[0-9.]+-[0-9.]+" OR NOT out MATCHES "break-even at 3 workers: diloco-h2 reaches ddp's loss")
  message(FATAL_ERROR "plan --fit: no decision rows or break-even:\n${out}")
endif()
file(READ ${WORK}/out/s/decision.json decision)
string(JSON rows LENGTH "${decision}" rows)
if(NOT rows EQUAL 2)
  message(FATAL_ERROR "decision.json: ${rows} rows, expected 2 (ddp and diloco-h2 at 3 workers)")
endif()
check_in_browser(out/s/decision.html 2 0)
expect_failure(plan_no_sweep "nope" plan s.yaml --fit nope)

# Several runs in one report; then only some entries.
run_narrows(report out/s out/s-sweep/profile-home-100m_d_model-16 -o both.html)
check_in_browser(both.html 10 0)
run_narrows(report out/s out/s-sweep/profile-home-100m_d_model-16 --entry diloco-h2 -o one.html)
file(READ ${WORK}/one.html html)
if(NOT html MATCHES "s/diloco-h2" OR html MATCHES "s/ddp" OR html MATCHES "timeline-0-1")
  message(FATAL_ERROR "--entry diloco-h2 kept other entries")
endif()
check_in_browser(one.html 8 0)
expect_failure(no_entry "report: no run has an entry named 'nope'" report out/s --entry nope -o both.html)

# Bad folders and files: exit 2, the place named, an existing report left as it was.
file(READ ${WORK}/both.html before)
expect_failure(no_folder "nope: not a run folder (no summary.json) nor a sweep folder" report nope -o both.html)
file(COPY ${WORK}/out/s DESTINATION ${WORK}/broken)
file(APPEND ${WORK}/broken/s/ddp/metrics.jsonl "{\"step\": 9, \"virtual_time_s\": \n")
expect_failure(bad_line "broken/s/ddp/metrics.jsonl:" report out/s broken/s -o both.html)
file(WRITE ${WORK}/broken/s/summary.json "{\"results\": 3}")
expect_failure(bad_summary "broken/s/summary.json: expected an object with a \"results\" list" report broken/s -o both.html)
file(READ ${WORK}/both.html after)
if(NOT before STREQUAL after)
  message(FATAL_ERROR "a failed report changed the existing file")
endif()
expect_failure(fit_not_sweep "out/s/sweep.json: cannot be read" fit out/s)
