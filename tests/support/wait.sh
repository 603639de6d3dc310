# Waiting in the shell suites (sourced; POSIX sh), like tests/support/wait.h:
# never sleep a fixed time and then check, poll the condition with a
# generous limit instead.

# wait_until SECONDS COMMAND [ARG...]: runs COMMAND every 0.1 s until it
# succeeds, for at least SECONDS (the time COMMAND itself takes is on top,
# so a loaded machine only makes the wait longer).  Returns 0 when it
# succeeded, 1 when it never did.
wait_until() {
  _wu_tries=$(($1 * 10))
  shift
  while ! "$@"; do
    [ "$_wu_tries" -gt 0 ] || return 1
    _wu_tries=$((_wu_tries - 1))
    sleep 0.1
  done
  return 0
}

# wait_while SECONDS COMMAND [ARG...]: the same until COMMAND fails.
wait_while() {
  _wu_tries=$(($1 * 10))
  shift
  while "$@"; do
    [ "$_wu_tries" -gt 0 ] || return 1
    _wu_tries=$((_wu_tries - 1))
    sleep 0.1
  done
  return 0
}

# The default limit of a wait for something that should happen soon.
CONCH_WAIT_S=20
