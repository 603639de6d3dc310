# tree-leader: a client-side shield against servers that signal the pid
# only (envd).  The client starts
#   /bin/sh -c "<this text>" tree-leader GRACE_S CMD [ARGS...]
# instead of CMD ARGS.  Where this shell is not the leader of its own
# process group (envd's piped processes stay in envd's group), CMD runs in
# a session of its own (setsid), and this shell stays as a leader that
#   - forwards a TERM to CMD's whole group, and GRACE_S seconds later sends
#     it a KILL (what is left of it: members that ignore TERM);
#   - when it is itself killed (SIGKILL: SendSignal KILL, the deadline),
#     has CMD's group KILLed at once by a watcher that sees its end (EOF on
#     a FIFO only this shell holds open for writing);
#   - passes CMD's stdin on (a background job's stdin is /dev/null
#     otherwise), and ends as CMD ended: same exit code, or the same signal.
# Where this shell already leads its group (a PTY, or a server that
# signals groups, such as conch serve) it just execs CMD.
# Documented in tools/conch/README.md ("Servers that signal the pid only").
g=$1
shift
exec 3<&0 </dev/null
pg=
read -r _ _ _ _ pg _ </proc/$$/stat 2>/dev/null
if [ "$pg" = "$$" ] || ! command -v setsid >/dev/null 2>&1; then
  exec 3<&-
  exec "$@"
fi
# The watcher, started before CMD: it reads CMD's id, then "ok" at this
# shell's normal end; EOF instead means this shell was killed.  All FIFO
# ends are opened here first (the read-write open does not block), so
# neither side can hang on open.
w=
f=$(mktemp -u "${TMPDIR:-/tmp}/tree-leader.XXXXXXXX")
if mkfifo -m 600 "$f" 2>/dev/null; then
  # shellcheck disable=SC2094 # one FIFO, three ends: meant
  exec 6<>"$f" 4>"$f" 5<"$f" 6<&-
  rm -f "$f"
  (
    exec 4>&- 3<&-
    IFS= read -r id <&5 && IFS= read -r m <&5
    [ -n "$id" ] && [ "$m" != ok ] && kill -s KILL -- "-$id"
  ) >/dev/null 2>&1 &
  exec 5<&-
  w=1
fi
# The trap is set before CMD starts: a TERM at any time is forwarded.
t=0
c=
gw=
# shellcheck disable=SC2317 # run by the trap
on_term() {
  t=1
  [ -n "$c" ] || return 0 # CMD not started yet: forwarded once it is
  kill -s TERM -- "-$c" 2>/dev/null
  if [ -z "$gw" ]; then
    (
      exec 4>&-
      sleep "$g"
      kill -s KILL -- "-$c"
    ) >/dev/null 2>&1 &
    gw=$!
  fi
}
trap on_term TERM
setsid "$@" <&3 3<&- 4>&- &
c=$!
exec 3<&-
[ -n "$w" ] && echo "$c" >&4
[ "$t" = 1 ] && on_term
while :; do
  t=0
  wait "$c"
  s=$?
  if [ "$t" = 1 ] && [ "$s" -gt 128 ] && kill -0 "$c" 2>/dev/null; then
    continue
  fi
  break
done
[ -n "$w" ] && echo ok >&4
exec 4>&-
if [ "$s" -gt 128 ] && [ "$s" -lt 144 ]; then
  trap - TERM
  kill -s "$(kill -l "$s")" $$
fi
exit "$s"
