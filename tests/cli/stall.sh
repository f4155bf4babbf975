#!/usr/bin/env bash
# A deployed run that no worker finishes exits non-zero, with what it recorded written. Worker 1 of
# two is stopped (SIGSTOP) mid-run: rank 0's outer all-reduce and then its settling time out
# (deploy.collective_timeout_s 1) before a heartbeat declares worker 1 dead (timeout_s 8), so rank
# 0 is dropped from its own run and no worker reaches the last step.
#   tests/cli/stall.sh NARROWS SRC WORK
set -u
narrows=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
cat "$src"/README.md "$src"/docs/*.md "$src"/docs/*/*.md > corpus.txt
cat > stall.yaml <<'YAML'
name: stall
seed: 3
threads: 1
model: {preset: nano}
data: {path: corpus.txt}
train: {steps: 200000, batch_size: 4, warmup_steps: 4}
eval: {every: 50, batches: 2, batch_size: 4}
workers: {count: 2}
output: {dir: out, log_every: 10}
deploy: {security: plain, heartbeat_s: 0.1, timeout_s: 8, collective_timeout_s: 1}
compare: [{algorithm: diloco, inner_steps: 10, name: dl}]
YAML
port=$((20000 + RANDOM % 10000))
"$narrows" worker stall.yaml --rank 0 --world 2 --master 127.0.0.1:$port > r0.out 2> r0.err &
p0=$!
"$narrows" worker stall.yaml --rank 1 --world 2 --master 127.0.0.1:$port -q > r1.out 2> r1.err &
p1=$!
fail() { echo "stall: $*" >&2; kill -CONT $p1 2>/dev/null; kill -9 $p0 $p1 2>/dev/null; for f in r0.err r1.err; do echo "--- $f" >&2; tail -20 $f >&2; done; exit 1; }
sleep 4  # rank 0 trains a few hundred outer steps meanwhile
[ -n "$(ls out/stall/dl/spool 2>/dev/null)" ] || fail "rank 0 is not training after 4 s"
kill -STOP $p1
code=0
timeout 120 tail --pid=$p0 -f /dev/null || fail "rank 0 still running 120 s after worker 1 stopped"
wait $p0 || code=$?
kill -CONT $p1; kill -9 $p1 2>/dev/null; wait $p1 2>/dev/null
[ "$code" != 0 ] || fail "rank 0 exited 0 though no worker reached the last step"
grep -q "ended before its last step" r0.err || fail "rank 0's error does not say the entry ended early"
grep -q '"type":"dropped"' out/stall/dl/events.jsonl || fail "events.jsonl lacks the dropped worker"
[ -s out/stall/dl/metrics.jsonl ] || fail "metrics.jsonl not written"
echo "stall: rank 0 exited $code; $(grep -c . out/stall/dl/metrics.jsonl) lines of metrics kept"
