#!/bin/bash
# The CLI's file commands (issue 23) against `conch serve`: ls (-l,
# --depth), stat, mkdir (-p), mv, rm and watch (-r, --json, Ctrl-C), each
# checked against the directory here, and the exit code of each class of
# failure (a missing path 252, not a directory 253, already there 254, a
# path without its ':' 2, no server 255).
#
#   test_files.sh /path/to/conch [conch|node]
set -u
CONCH=$1
server=${2:-conch} # conch, or node: tests/api/node/server.mjs
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/wait.sh"
. "$here/../support/peer.sh"
. "$here/../support/suite.sh"
unset CONCH_URL CONCH_TOKEN CONCH_TOKEN_FILE CONCH_JSON_ERRORS CONCH_USER

# The server: conch serve, or with "node" the envd-like connect-node peer
# of tests/api/node (h2c; "h1" its second instance, with --http1).
start_server() { # name [--http1]
  local name=$1
  shift
  if [ "$server" = node ]; then
    if [ ! -d "$here/../node_modules/@connectrpc/connect-node" ]; then
      echo "FAIL no tests/node_modules: run \`npm ci\` in tests"
      exit 1
    fi
    peer_start "$name" node "$here/../api/node/server.mjs" --port 0 "$@"
  else
    peer_start "$name" "$CONCH" serve --listen 127.0.0.1:0 --no-token
  fi || {
    echo "FAIL the server printed no LISTENING line within 120 s:"
    cat "$tmp/$name.err"
    exit 1
  }
  pids+=("$peer_pid")
}
start_server serve
U="--url http://127.0.0.1:$peer_port"
d=$tmp/d
mkdir -p "$d/a/b"
printf 'hello' >"$d/a/f.txt"
printf 'x' >"$d/top"
ln -s f.txt "$d/a/link"

check "ls" "a/ top" "$("$CONCH" $U ls ":$d" | tr '\n' ' ' | sed 's/ $//')"
check "ls --depth 2" "a/ a/b/ a/f.txt a/link top" \
  "$("$CONCH" $U ls --depth 2 ":$d" | tr '\n' ' ' | sed 's/ $//')"
check "ls --depth=3 names from the listed directory" "a/b/" \
  "$("$CONCH" $U ls --depth=3 ":$d" | grep '^a/b')"
line=$("$CONCH" $U ls -l ":$d/a" | grep ' f.txt$')
check "ls -l: permissions, size, name" "-rw-r--r-- 5 f.txt" \
  "$(printf '%s\n' "$line" | awk '{print $1, $4, $7}')"
check "ls -l: owner" "$(id -un)" "$(printf '%s\n' "$line" | awk '{print $2}')"
check "ls -l: a symlink's target" "link -> $d/a/f.txt" \
  "$("$CONCH" $U ls -l ":$d/a" | sed -n 's/.* \(link -> .*\)$/\1/p')"
check "ls of a missing path exits 252" 252 "$(rc "$CONCH" $U ls ":$d/none")"
check "ls of a file exits 253" 253 "$(rc "$CONCH" $U ls ":$d/top")"
check "ls of a path without ':' exits 2" 2 "$(rc "$CONCH" $U ls "$d")"
check "ls --depth 0 exits 2" 2 "$(rc "$CONCH" $U ls --depth 0 ":$d")"
check "ls --depth x exits 2" 2 "$(rc "$CONCH" $U ls --depth x ":$d")"
"$CONCH" $U ls ":$d" ":$d" >/dev/null 2>"$tmp/two.err"
check "ls of two paths exits 2" 2 "$?"

st=$("$CONCH" $U stat ":$d/a/f.txt")
check "stat: path" "path: $d/a/f.txt" "$(printf '%s\n' "$st" | grep '^path:')"
check "stat: type" "type: file" "$(printf '%s\n' "$st" | grep '^type:')"
check "stat: size" "size: 5" "$(printf '%s\n' "$st" | grep '^size:')"
check "stat: mode" "mode: $(stat -c %04a "$d/a/f.txt")" \
  "$(printf '%s\n' "$st" | grep '^mode:')"
check "stat: modified (UTC)" \
  "modified: $(date -u -d "@$(stat -c %Y "$d/a/f.txt")" +%Y-%m-%dT%H:%M:%S)" \
  "$(printf '%s\n' "$st" | sed -n 's/^\(modified: [^.]*\)\..*Z$/\1/p')"
check "stat: no symlink_target for a file" 0 \
  "$(printf '%s\n' "$st" | grep -c '^symlink_target:')"
check "stat of a symlink: its target" "symlink_target: $d/a/f.txt" \
  "$("$CONCH" $U stat ":$d/a/link" | grep '^symlink_target:')"
# The user.e2b.* xattrs as metadata lines, where the file system has user
# xattrs and the server reads them (the connect-node peer does not).
if [ "$server" = node ]; then
  echo "skip stat: metadata (the connect-node peer has no xattr metadata)"
elif ! /usr/bin/python3 -c 'import os, sys
os.setxattr(sys.argv[1], "user.e2b.color", b"blue")' "$d/a/f.txt" 2>/dev/null
then
  echo "skip stat: metadata (no user xattrs on $d)"
else
  check "stat: metadata" "metadata.color: blue" \
    "$("$CONCH" $U stat ":$d/a/f.txt" | grep '^metadata\.')"
fi
check "stat of a missing path exits 252" 252 "$(rc "$CONCH" $U stat ":$d/none")"
"$CONCH" $U stat ":$d/none" 2>"$tmp/stat.err"
check "... saying not_found" 1 "$(grep -c 'not_found' "$tmp/stat.err")"
check "stat without an operand exits 2" 2 "$(rc "$CONCH" $U stat)"

check "mkdir with parents" 0 "$(rc "$CONCH" $U mkdir ":$d/m/n/o")"
check "... made" yes "$([ -d "$d/m/n/o" ] && echo yes)"
check "mkdir of what is there exits 254" 254 "$(rc "$CONCH" $U mkdir ":$d/m")"
check "mkdir -p of what is there exits 0" 0 "$(rc "$CONCH" $U mkdir -p ":$d/m" ":$d/m2")"
check "... and made the rest" yes "$([ -d "$d/m2" ] && echo yes)"
check "mkdir -p over a file exits 253" 253 "$(rc "$CONCH" $U mkdir -p ":$d/top")"

check "mv" 0 "$(rc "$CONCH" $U mv ":$d/top" ":$d/moved")"
check "... moved" "x" "$(cat "$d/moved" 2>/dev/null)$([ -e "$d/top" ] && echo ' and still there')"
check "mv of a missing path exits 252" 252 "$(rc "$CONCH" $U mv ":$d/top" ":$d/y")"
check "mv with one operand exits 2" 2 "$(rc "$CONCH" $U mv ":$d/moved")"
check "mv to a local path exits 2" 2 "$(rc "$CONCH" $U mv ":$d/moved" "$d/z")"

check "rm of a file and a tree" 0 "$(rc "$CONCH" $U rm ":$d/moved" ":$d/m")"
check "... removed" "gone" "$([ -e "$d/moved" ] || [ -e "$d/m" ] || echo gone)"
check "rm of nothing is no error" 0 "$(rc "$CONCH" $U rm ":$d/none")"
check "rm of / exits 253" 253 "$(rc "$CONCH" $U rm ":/")"

# watch: the events of the directory, one line each, as they happen.
"$CONCH" $U watch ":$d/a" >"$tmp/w.out" 2>"$tmp/w.err" &
wp=$!
pids+=("$wp")
if ! wait_until "$CONCH_WAIT_S" grep -q '^conch: watching' "$tmp/w.err"; then
  echo "FAIL watch did not begin:"
  cat "$tmp/w.err"
  fails=$((fails + 1))
fi
printf 'new' >"$d/a/new.txt"
mkdir "$d/a/b/deeper"
mv "$d/a/new.txt" "$d/a/renamed.txt"
rm "$d/a/renamed.txt"
wait_until "$CONCH_WAIT_S" grep -q '^remove renamed.txt$' "$tmp/w.out"
check "watch: create" 1 "$(grep -c '^create new.txt$' "$tmp/w.out")"
check "watch: write" yes "$(grep -q '^write new.txt$' "$tmp/w.out" && echo yes)"
check "watch: rename" 1 "$(grep -c '^rename new.txt$' "$tmp/w.out")"
check "watch: remove" 1 "$(grep -c '^remove renamed.txt$' "$tmp/w.out")"
check "watch without -r: nothing from b/" 0 "$(grep -c 'deeper' "$tmp/w.out")"
kill -INT "$wp"
wait "$wp"
check "watch ends on Ctrl-C with 130" 130 "$?"

"$CONCH" $U watch -r --json ":$d" >"$tmp/r.out" 2>"$tmp/r.err" &
wp=$!
pids+=("$wp")
wait_until "$CONCH_WAIT_S" grep -q '^conch: watching' "$tmp/r.err"
printf 'x' >"$d/a/b/inner"
wait_until "$CONCH_WAIT_S" grep -q 'inner' "$tmp/r.out"
check "watch -r --json: an event below, as JSON" \
  '{"type":"create","name":"a/b/inner"}' "$(grep -m1 inner "$tmp/r.out")"
kill -TERM "$wp"
wait "$wp"
check "watch ends on SIGTERM with 143" 143 "$?"
check "watch of a missing directory exits 252" 252 \
  "$(rc "$CONCH" $U watch ":$d/none")"
check "watch of a file exits 253" 253 "$(rc "$CONCH" $U watch ":$d/a/f.txt")"

# A server that is not there: 255, as for the process commands.
check "ls with no server exits 255" 255 \
  "$(rc "$CONCH" --url http://127.0.0.1:1 ls ":$d")"

[ "$fails" -eq 0 ] && echo "all file command checks passed"
exit $((fails > 0))
