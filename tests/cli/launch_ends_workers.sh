#!/usr/bin/env bash
# A launch killed alone (SIGTERM to its process, not to its group) takes its workers with it: none
# trains on as an orphan. Usage: launch_ends_workers.sh NARROWS WORK
set -u
narrows=$(realpath "$1")
work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
printf 'name: orphans\nmodel: {preset: nano}\ndata: {path: austen}\ntrain: {steps: 100000, batch_size: 2}\n%s\n' \
  'eval: {every: 100000}' > o.yaml
printf 'workers: {count: 2}\ncompare: [ddp]\noutput: {dir: runs}\n' >> o.yaml
setsid "$narrows" launch --local 2 o.yaml -q > launch.log 2>&1 &
launch=$!
for _ in $(seq 60); do
  [ "$(pgrep -P "$launch" | wc -l)" -eq 2 ] && break
  sleep 0.5
done
workers=$(pgrep -P "$launch" | tr '\n' ' ')
[ -n "$workers" ] || { echo "the launch started no workers"; cat launch.log; exit 1; }
sleep 2  # the workers past their start
kill -TERM "$launch"
for _ in $(seq 20); do
  left=0
  for w in $workers; do kill -0 "$w" 2> /dev/null && left=$((left + 1)); done
  [ "$left" -eq 0 ] && { echo "the launch's workers ended with it"; exit 0; }
  sleep 0.5
done
echo "workers $workers still run after their launch was killed"
kill -KILL $workers 2> /dev/null
exit 1
