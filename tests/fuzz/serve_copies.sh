#!/bin/sh
# fuzz_serve.c copies two pieces of tools/conch that it cannot link
# (serve_main.c and serve_spawn.c hold them beside code that starts
# processes): config_defaults()'s values and srv_resolve_cwd()'s rules
# for a cwd, up to the file-system check.  This fails when a copy and its
# original disagree, naming the lines.
# Usage: serve_copies.sh SOURCE_DIR
set -eu
src=$1
main=$src/tools/conch/serve_main.c
spawn=$src/tools/conch/serve_spawn.c
fuzz=$src/tests/fuzz/fuzz_serve.c
tmp=${TMPDIR:-/tmp}/serve_copies.$$
mkdir "$tmp"
trap 'rm -rf "$tmp"' EXIT INT TERM
rc=0

# The cfg-> assignments of a block, but the listener (fuzz_serve uses TCP).
assignments() {
  grep -E '^[[:space:]]*cfg->[a-z_]+ = ' | grep -v 'cfg->listen ' |
    sed -e 's/[[:space:]]*\/\*.*//' -e 's/^[[:space:]]*//' | sort
}
sed -n '/^static void config_defaults(srv_config \*cfg) {/,/^}/p' "$main" |
  assignments >"$tmp/main"
sed -n "/serve_main.c's defaults (config_defaults()/,/end of serve_main.c's defaults/p" \
  "$fuzz" | assignments >"$tmp/fuzz"
# compare WHAT ORIGINAL COPY: both found and alike, else say so (rc 1).
compare() {
  if [ ! -s "$2" ] || [ ! -s "$3" ]; then
    echo "serve_copies: $1 not found in both files" >&2
    exit 1
  fi
  if ! diff -u "$2" "$3" >"$tmp/diff"; then
    echo "serve_copies: fuzz_serve.c's $1 differ from the original's" \
      "(- original, + fuzz_serve.c):" >&2
    cat "$tmp/diff" >&2
    rc=1
  fi
}
compare "serve_main.c config_defaults() values" "$tmp/main" "$tmp/fuzz"

# srv_resolve_cwd() from its first test of |cwd| to the out-of-memory
# return: the rules, before the file-system check each does its own way.
rules() {
  sed -n '/^conch_code srv_resolve_cwd(/,/^}/p' "$1" |
    sed -n '/if (cwd == NULL/,/return CONCH_CODE_RESOURCE_EXHAUSTED;/p' |
    sed -e 's/^[[:space:]]*//'
}
rules "$spawn" >"$tmp/spawn"
rules "$fuzz" >"$tmp/fcwd"
compare "serve_spawn.c srv_resolve_cwd() rules" "$tmp/spawn" "$tmp/fcwd"
[ "$rc" -eq 0 ] && echo "serve_copies: $(wc -l <"$tmp/main") defaults and" \
  "$(wc -l <"$tmp/spawn") lines of cwd rules agree"
exit "$rc"
