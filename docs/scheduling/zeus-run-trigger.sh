#!/bin/sh
# One scheduled trigger for schedulers that know only success and failure (a Kubernetes CronJob):
# exit 75 (busy: the previous recurrence still holds the run directory; nothing was done) counts
# as success, so the job is not marked failed or retried; every other code is passed on.
# SIGTERM and SIGINT reach zeus-run: this shell may be a container's PID 1, which the kernel sends
# no signal it has no handler for, so it traps them and passes SIGTERM on (a pod's deletion then
# stops zeus-run gracefully: the trial's script gets its stop and saves), and waits until zeus-run ends.
zeus-run run job.yaml --next -q "$@" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' TERM INT
while :; do
  wait "$pid"
  rc=$?
  kill -0 "$pid" 2>/dev/null || break
done
[ "$rc" = 75 ] && exit 0
exit "$rc"
