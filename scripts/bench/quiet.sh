#!/usr/bin/env bash
# Runs "$@" with other busy processes paused (SIGSTOP), then resumes them (SIGCONT).
me=$$
pids=$(top -b -n1 -w 200 | awk 'NR>7 && $9+0 > 3 {print $1}')
stopped=""
for p in $pids; do
  [ "$p" = "$me" ] && continue
  kill -STOP "$p" 2>/dev/null && stopped="$stopped $p"
done
# rustc/cargo/cc started before or during: pause them too
for name in rustc cargo cc1 ld rust-lld; do
  for p in $(pgrep -x "$name"); do kill -STOP "$p" 2>/dev/null && stopped="$stopped $p"; done
done
trap 'for p in $stopped; do kill -CONT $p 2>/dev/null; done' EXIT
sleep 2
echo "paused:$(echo $stopped | wc -w) processes; load: $(cut -d' ' -f1 /proc/loadavg)" >&2
"$@"
