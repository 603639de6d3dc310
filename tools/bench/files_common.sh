# Sourced (bash) by the big-file benchmarks, tools/bench/files_cp.sh and
# tools/bench/python/files.sh: a fresh server per transfer, its peak RSS,
# the table's rows, each copy compared with the source.  The caller sets
# conch (the CLI), bytes, work (a directory it may remove) and optionally
# server (conch, the default, or node: the envd-like connect-node peer of
# tests/api/node, whose start_server h1 speaks HTTP/1.1).
cpid=""
cleanup() {
  [ -n "$cpid" ] && kill "$cpid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

now() { date +%s.%N; }
mibs() { awk -v b="$bytes" -v s="$1" 'BEGIN {printf "%.0f", b / 1048576 / s}'; }

runs=0
start_server() { # [h1]; sets url
  local i=0 port="" listen
  runs=$((runs + 1))
  listen=$work/listen.$runs # a new file each time: never the last server's
  if [ "${server:-conch}" = node ]; then
    node "$top/tests/api/node/server.mjs" --port 0 ${1:+--http1} \
      </dev/null >"$listen" 2>"$work/err" &
  else
    "$conch" serve --listen 127.0.0.1:0 --no-token >"$listen" 2>"$work/err" &
  fi
  cpid=$!
  while [ -z "$port" ]; do
    i=$((i + 1)); [ $i -lt 600 ] || { echo "no LISTENING" >&2; exit 1; }
    sleep 0.1
    port=$(sed -n 's/^LISTENING \([0-9][0-9]*\)$/\1/p' "$listen" 2>/dev/null)
  done
  url=http://127.0.0.1:$port
}
stop_server() { # sets hwm, the server's VmHWM (KiB)
  hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$cpid/status")
  kill "$cpid"; wait "$cpid" 2>/dev/null || true
  cpid=""
}

table_head() {
  printf '| client | direction | MiB/s | server VmHWM (KiB) | client max RSS (KiB) |\n'
  printf '|---|---|---|---|---|\n'
}
row() { # client direction t0 t1
  printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" \
    "$(mibs "$(awk -v s="$3" -v e="$4" 'BEGIN {print e - s}')")" "$hwm" \
    "$(cat "$work/rss")"
}
verify() { cmp -s "$work/src" "$1" || { echo "$1 differs from the source" >&2; exit 1; }; }
