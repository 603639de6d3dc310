#!/bin/bash
# The man page (conch.1) and the bash completion (conch.bash) keep step
# with the CLI's option tables: every option that `conch --help`,
# `conch COMMAND --help` and `conch serve --help` print is in both, and
# every option the completion offers is one of them.  Each command's help
# has a usage line and an example; the completion really completes.
#
#   test_docs.sh /path/to/conch /path/to/tools/conch/doc
set -u
CONCH=$1
DOC=$2
fails=0
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}

# Options of a help text: the first word of the lines that document one.
opts_of() { sed -n 's/^  \(--*[a-z][a-z0-9.-]*\).*/\1/p'; }

commands=$("$CONCH" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
[ -n "$commands" ] || fail "conch --help lists no commands"
all=$("$CONCH" --help | opts_of)
for c in $commands; do
  h=$("$CONCH" "$c" --help) || fail "conch $c --help exits non-zero"
  printf '%s\n' "$h" | grep -q "^usage: conch $c" || fail "conch $c --help: no usage line"
  printf '%s\n' "$h" | grep -q "^example:" || fail "conch $c --help: no example"
  all="$all
$(printf '%s\n' "$h" | opts_of)"
  grep -q "^\.B $c\$" "$DOC/conch.1" || fail "conch.1 does not describe $c"
  grep -qw "$c" "$DOC/conch.bash" || fail "conch.bash does not complete $c"
done
all=$(printf '%s\n' "$all" | sort -u)
n=$(printf '%s\n' "$all" | wc -l)
[ "$n" -ge 25 ] || fail "only $n options found in the help texts"
man=$(sed 's/\\-/-/g' "$DOC/conch.1")
for o in $all; do
  # An entry of its own: a .B, .BI or .BR line that names it.
  printf '%s\n' "$man" | grep -qE "^\.B[IR]? (.* )?$o( |\"|\$)" ||
    fail "conch.1 has no entry for $o"
  grep -qe "[ \"]$o[ \")]" -e "[ \"]$o\$" "$DOC/conch.bash" || fail "conch.bash lacks $o"
done
# The other way: the completion offers nothing the CLI does not know.
for o in $(grep -o -e ' --[a-z][a-z0-9.-]*' "$DOC/conch.bash" | sort -u); do
  printf '%s\n' "$all" | grep -qx -e "$o" || fail "conch.bash offers $o, which no --help prints"
done

complete_words() { # words... (the last one is completed)
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1));
    _conch; echo "${COMPREPLY[*]}"' _ "$DOC/conch.bash" "$@"
}
got=$(complete_words conch run --c)
[ "$got" = "--cwd --cacert --codec" ] || fail "completing 'conch run --c': [$got]"
got=$(complete_words conch --protocol g)
[ "$got" = "grpc grpc-web" ] || fail "completing 'conch --protocol g': [$got]"
got=$(complete_words conch --url x p)
[ "$got" = "ps pty" ] || fail "completing 'conch --url x p': [$got]"
got=$(complete_words conch serve --w)
[ "$got" = "--workdir" ] || fail "completing 'conch serve --w': [$got]"

echo "$n options checked"
[ "$fails" -eq 0 ] && echo "all ok"
exit $((fails > 0))
