/* The tree leader: a shield for process trees on servers that signal the
   pid only (envd).  See "Process trees" in conch/process.h.

   A piped process is started as

     /bin/sh -c <conch__tree_script> -- GRACE_S MODE CMD ARGS...

   Line 1: where that shell already leads its process group (a PTY, or a
   server that puts every process in a group of its own, such as conch
   serve) it just execs CMD: nothing else changes.  Otherwise it needs GNU
   timeout (coreutils) and a FIFO in ${TMPDIR:-/tmp}; without them MODE
   "auto" execs CMD unprotected and MODE "on" refuses (exit 125, a line on
   stderr).  With them the shell execs

     timeout -k GRACE_S 0 /bin/sh -c <inner> -- GRACE_S CMD ARGS...

   so the pid the server reports is timeout's, which
     - leads a new process group holding the whole tree;
     - forwards TERM, INT, HUP and QUIT to the group and KILLs the group
       GRACE_S later if CMD still runs;
     - ends exactly as CMD did: its exit code (0-255), or death by CMD's
       signal (timeout raises it on itself);
   and <inner> (CMD's own pid until it execs CMD, so timeout's status is
   CMD's) first starts a watcher (`/bin/sh -c <watch> conch-tree-watch
   PID ...`: CMD's arguments are not on its command line) in the group
   and waits until it has set its trap (the watcher then lets go of the
   command substitution's pipe), so that no signal can reach CMD's group
   before the watcher catches it (one that came first used to kill it),
   given timeout's pid (the outer shell's $$, which exec kept) rather than
   its own $PPID: a timeout KILLed before <inner> began leaves <inner> the
   child of the server or a subreaper, and a watcher of that process
   would never fire (and would aim at the wrong group when it did),
   nobody's child, holding only the FIFO's read end (timeout holds the only
   write end):
     - at EOF timeout has ended; if CMD still lives, timeout was killed
       (SIGKILL: SendSignal KILL, the server's deadline): the group is
       KILLed at once;
     - a TERM or HUP that reached the group starts a timer (a subshell
       of the watcher that ignores both, so that a second TERM, from a
       second SendSignal or a member's TERM to its group that timeout
       forwards again, does not end it) that KILLs
       what is left of the group GRACE_S later, even after CMD and
       timeout ended (members that trap TERM).  INT and QUIT, which
       SendSignal cannot send, are not caught: a shell's background
       jobs, the watcher among them, ignore them from the start;
     - otherwise (a normal end) background members are left alone, as the
       server would leave them.
   A read of the FIFO that a trapped signal interrupts is repeated while
   timeout lives (its pid cannot be reused while the group exists).  The
   watcher keeps no stdin, stdout or stderr, so the server's end of the
   process is not delayed; CMD gets the real stdin (no other copy outlives
   timeout).  An unknown CMD fails as the server's own `exec "$@"` does
   ("--: 1: exec: X: not found", exit 127). */
#include <stdio.h>
#include <string.h>

#include "api_int.h"

static const char script[] =
    "g=$1 m=$2; shift 2; p=; read -r _ _ _ _ p _ </proc/$$/stat 2>/dev/null;"
    " [ \"$p\" = $$ ] && exec \"$@\"\n"
    "f=\n"
    "if command -v timeout >/dev/null 2>&1 &&"
    " timeout --version >/dev/null 2>&1; then\n"
    "  f=$(mktemp -u \"${TMPDIR:-/tmp}/conch-tree.XXXXXXXX\" 2>/dev/null) &&"
    " mkfifo -m 600 \"$f\" 2>/dev/null || f=\n"
    "fi\n"
    "if [ -z \"$f\" ]; then\n"
    "  if [ \"$m\" = on ]; then\n"
    "    echo \"conch: the tree leader needs GNU timeout (coreutils) and a"
    " FIFO in \\${TMPDIR:-/tmp} (CONCH_TREE=auto runs without it)\" >&2\n"
    "    exit 125\n"
    "  fi\n"
    "  exec \"$@\"\n"
    "fi\n"
    "exec 6<>\"$f\" 4>\"$f\" 5<\"$f\" 6<&-\n"
    "rm -f \"$f\"\n"
    "exec timeout -k \"$g\" 0 /bin/sh -c 'exec 4>&-; g=$1 P=$2 w=$3; shift 3;"
    " r=$(/bin/sh -c \"$w\" conch-tree-watch $P $$ \"$g\" </dev/null"
    " 2>/dev/null &); exec 5<&-; exec \"$@\"' -- \"$g\" $$"
    " 'P=$1 C=$2 g=$3 t=0; on() { [ $t = 1 ] && return; t=1;"
    " (trap \"\" TERM HUP; sleep $g; kill -s KILL -- -$P) & }; trap on TERM HUP; exec >/dev/null;"
    " while read -r _ _ s _ </proc/$P/stat && [ \"$s\" != Z ]; do"
    " read -r _ <&5; done;"
    " kill -0 $C && kill -s KILL -- -$P' \"$@\"\n";

/* Leading arguments before CMD: -c SCRIPT -- GRACE MODE. */
#define TREE_ARGS 5

const char *conch__tree_script(void) { return script; }

int conch__tree_parse(const char *s) {
  if (s == NULL || *s == '\0' || strcmp(s, "auto") == 0) {
    return CONCH_TREE_AUTO;
  }
  if (strcmp(s, "off") == 0) {
    return CONCH_TREE_OFF;
  }
  if (strcmp(s, "on") == 0) {
    return CONCH_TREE_ON;
  }
  return -1;
}

int conch__tree_wrap(const conch_mem *m, long grace_ms, int on, const char *cmd,
                     const char *const *args, size_t nargs,
                     conch__tree_argv *out) {
  size_t i;
  if (grace_ms <= 0) {
    grace_ms = 1;
  }
  snprintf(out->grace, sizeof(out->grace), "%ld.%03ld", grace_ms / 1000,
           grace_ms % 1000);
  out->args = api_calloc(m, nargs + TREE_ARGS + 1, sizeof(char *));
  if (out->args == NULL) {
    return CONCH_ERR_NOMEM;
  }
  out->args[0] = "-c";
  out->args[1] = script;
  out->args[2] = "--";
  out->args[3] = out->grace;
  out->args[4] = on ? "on" : "auto";
  out->args[5] = cmd;
  for (i = 0; i < nargs; i++) {
    out->args[TREE_ARGS + 1 + i] = args[i];
  }
  out->nargs = nargs + TREE_ARGS + 1;
  return 0;
}

int conch__tree_unwrap(const char *cmd, char *const *args, size_t nargs,
                       size_t *skip) {
  if (cmd == NULL || strcmp(cmd, "/bin/sh") != 0 || nargs < TREE_ARGS + 1 ||
      args[0] == NULL || strcmp(args[0], "-c") != 0 || args[1] == NULL ||
      strcmp(args[1], script) != 0) {
    return 0;
  }
  *skip = TREE_ARGS; /* args[TREE_ARGS] is CMD */
  return 1;
}
