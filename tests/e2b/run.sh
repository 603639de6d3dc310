#!/bin/bash
# Starts one envd-compatible server on 127.0.0.1 (a free port, with an access
# token), runs the E2B SDK suite (sdk_test.mjs) against it, stops it.
#
#   run.sh conch_serve /path/to/conch     `conch serve` (token from CONCH_TOKEN)
#   run.sh conch_serve_no_token /path/to/conch
#                                         `conch serve --no-token`, as for the
#                                         SDK's debug mode: a few run: cases
#   run.sh conch_serve_nobody /path/to/conch
#                                         `conch serve --workdir DIR` run as
#                                         nobody (setpriv; needs root: else
#                                         skipped)
#   run.sh node_server                    tests/api/node/server.mjs --http1
#
# Needs Node.js >= 20.18.1 and `npm ci` in tests (the test peers' npm
# workspace: the SDK, and tests/api/node for node_server); scripts/setup.sh
# does it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../support/wait.sh"
. "$here/../support/peer.sh"
top=$(cd "$here/../.." && pwd)
target=${1:-}
conch=${2:-}

die() {
  echo "run.sh: $*" >&2
  exit 1
}

# ---- Prerequisites ----------------------------------------------------------
command -v node >/dev/null 2>&1 || die "node not found (Node.js >= 20.18.1 needed)"
node -e '
const [a, b, c] = process.versions.node.split(".").map(Number);
process.exit(a > 20 || (a === 20 && (b > 18 || (b === 18 && c >= 1))) ? 0 : 1);
' || die "Node.js >= 20.18.1 needed (have $(node -v))"

# The package that |dir| resolves (its own node_modules, else the
# workspace's, tests/node_modules) matches the pin of its package.json
# (`npm ci` was run in tests).
need_modules() { # dir package
  node -e '
const fs = require("fs");
const path = require("path");
const [dir, pkg] = process.argv.slice(1);
const want = require(dir + "/package.json").dependencies[pkg];
let have = null;
for (let d = dir; ; d = path.dirname(d)) {
  try {
    have = JSON.parse(fs.readFileSync(
      path.join(d, "node_modules", pkg, "package.json"), "utf8")).version;
    break;
  } catch {}
  if (path.dirname(d) === d) break;
}
if (have !== want) {
  console.error(`run.sh: ${dir} resolves ${pkg} ${have ?? "missing"}, ` +
    `package.json pins ${want}: run \`npm ci\` in tests (scripts/setup.sh does it)`);
  process.exit(1);
}' "$1" "$2" || exit 1
}
need_modules "$here" e2b

token="e2b-suite-$$-$RANDOM"
case "$target" in
  conch_serve)
    [ -x "$conch" ] || die "usage: run.sh conch_serve /path/to/conch (got '$conch')"
    server=(env CONCH_TOKEN="$token" "$conch" serve --listen 127.0.0.1:0)
    suite_flags=(--access-token "$token")
    ;;
  conch_serve_no_token)
    [ -x "$conch" ] || die "usage: run.sh conch_serve_no_token /path/to/conch"
    server=("$conch" serve --listen 127.0.0.1:0 --no-token)
    suite_flags=(--only '^(run: (stdout|cwd|envs)|commands.list|no process)')
    ;;
  conch_serve_nobody)
    [ -x "$conch" ] || die "usage: run.sh conch_serve_nobody /path/to/conch"
    if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
      echo "run.sh: skipped: serving as nobody needs root and setpriv"
      exit 0
    fi
    # nobody's home (/nonexistent) does not exist: --workdir gives the
    # SDK's requests, which name no cwd and no user, a place to run.
    workdir=$(mktemp -d /tmp/conch-e2b-nobody.XXXXXX)
    chown nobody "$workdir"
    trap 'rm -rf "$workdir"' EXIT
    # The conch binary must be reachable for nobody (a build under /root
    # is not): a copy in the work directory.
    cp "$conch" "$workdir/conch" && chmod 755 "$workdir" "$workdir/conch"
    server=(env CONCH_TOKEN="$token" setpriv --reuid nobody --regid nogroup
      --clear-groups "$workdir/conch" serve --listen 127.0.0.1:0
      --workdir "$workdir")
    suite_flags=(--access-token "$token" --server-user nobody
      --workdir "$workdir")
    ;;
  node_server)
    need_modules "$top/tests/api/node" @connectrpc/connect-node
    server=(node "$top/tests/api/node/server.mjs" --http1 --port 0
      --access-token "$token")
    # No PTYs there (Node has no openpty without a native module).
    suite_flags=(--access-token "$token" --no-pty)
    ;;
  *)
    die "usage: run.sh conch_serve|conch_serve_no_token /path/to/conch |" \
      "run.sh node_server"
    ;;
esac

# ---- The server -------------------------------------------------------------
tmp=$(mktemp -d)
srv=""
cleanup() {
  if [ -n "$srv" ]; then
    exec {peer_stdin}>&- # the server's stdin: it exits when it closes
    wait_while 5 kill -0 "$srv" 2>/dev/null
    if kill -0 "$srv" 2>/dev/null; then
      echo "run.sh: the server did not exit 5 s after its stdin closed; SIGTERM"
      kill -TERM "$srv" 2>/dev/null
      sleep 1
      kill -KILL "$srv" 2>/dev/null
    fi
    wait "$srv" 2>/dev/null
  fi
  rm -rf "$tmp" ${workdir:+"$workdir"}
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP

# stdin a pipe this script holds ($peer_stdin): the server goes when the
# script goes, however it ends.
peer_start server "${server[@]}"
ok=$?
srv=$peer_pid
if [ "$ok" != 0 ]; then
  echo "run.sh: ${server[*]} printed no 'LISTENING <port>' within 120 s:"
  cat "$tmp/server.err"
  exit 1
fi
port=$peer_port
echo "server: ${server[*]/$token/TOKEN} on port $port (pid $srv)"

# ---- The suite ----------------------------------------------------------------
node "$here/sdk_test.mjs" --url "http://127.0.0.1:$port" \
  "${suite_flags[@]}" {peer_stdin}>&-
rc=$?
if ! kill -0 "$srv" 2>/dev/null; then
  echo "run.sh: the server exited during the suite"
  rc=1
fi
if [ -s "$tmp/server.err" ]; then
  echo "--- server stderr (last 40 lines) ---"
  tail -n 40 "$tmp/server.err"
fi
exit "$rc"
