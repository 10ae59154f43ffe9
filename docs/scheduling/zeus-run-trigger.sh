#!/bin/sh
# One scheduled trigger for schedulers that know only success and failure (a Kubernetes CronJob):
# exit 75 (busy: the previous recurrence still holds the run directory; nothing was done) counts
# as success, so the job is not marked failed or retried; every other code is passed on.
zeus-run run job.yaml --next -q "$@"
rc=$?
[ "$rc" = 75 ] && exit 0
exit "$rc"
