#!/usr/bin/env bash
# Run "$@" with every other python process stopped (SIGSTOP), including ones started meanwhile;
# all are resumed (SIGCONT) afterwards, whatever happens. Ours carry QUIET_OWNER in their environment.
export QUIET_OWNER=$$
stopped=/tmp/quiet.$$; : > $stopped
others() { for p in $(pgrep -f '^[^ ]*python[0-9.]*( |$)'); do grep -qz "^QUIET_OWNER=$$\$" /proc/$p/environ 2>/dev/null || echo $p; done; }
resume() { kill $watcher 2>/dev/null; kill -CONT $(sort -u $stopped) 2>/dev/null; rm -f $stopped; }
trap resume EXIT INT TERM
( while true; do ps=$(others); [ -n "$ps" ] && { echo $ps | tr ' ' '\n' >> $stopped; kill -STOP $ps 2>/dev/null; }; sleep 2; done ) &
watcher=$!
sleep 2
"$@"
