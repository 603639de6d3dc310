#!/bin/sh
# Source rules a compiler does not enforce (STYLE.md 3.4, 3.10): library code
# allocates through conch_mem, never prints, and avoids the banned string
# functions.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
status=0
dirs="runtime"
[ -d api ] && dirs="$dirs api"
files=$(find $dirs -name '*.c' -o -name '*.h' | grep -v '/include/conch/adapters/' || true)

ban() {
  pattern=$1
  why=$2
  hits=$(grep -nE "$pattern" $files | grep -v 'conch-allow' || true)
  if [ -n "$hits" ]; then
    echo "$hits"
    echo "check-source: $why" >&2
    status=1
  fi
}
ban '(^|[^_a-zA-Z.>])(malloc|calloc|realloc|free)\(' \
    'raw allocation in library code: use conch__malloc & co (mem_int.h)'
ban '(^|[^_a-zA-Z])(sprintf|vsprintf|strcpy|strcat|strtok|atoi|atol|gets)\(' \
    'banned string function'
ban '(^|[^_a-zA-Z])(printf|puts|perror)\(|fprintf\((stdout|stderr)' \
    'the library never prints'
# Headers are the manual (STYLE.md): the comment of every public function
# that returns int says what it returns.
undocumented=$(awk '
  FNR == 1 { doc = "" }
  /\/\*/ { doc = "" }
  { doc = doc $0 "\n" }
  /CONCH_EXTERN[ \t]+int[ \t]/ {
    if (doc !~ /[Rr]eturns?[ ]/) {
      print FILENAME ":" FNR ": " $0
    }
    doc = ""
  }' runtime/include/conch/*.h $( [ -d api ] && echo api/include/conch/*.h ))
if [ -n "$undocumented" ]; then
  echo "$undocumented"
  echo "check-source: public functions returning int without a Returns line" >&2
  status=1
fi
# Every runtime source lives in a module folder (runtime/README.md), and a
# private header is included by its name alone, so no two modules may hold
# headers of the same name.
modules=$(cd runtime && for d in */; do [ "$d" = include/ ] || echo "${d%/}"; done)
private_header() { # NAME: is NAME a private runtime header?
  for m in $modules; do [ -e "runtime/$m/$1" ] && return 0; done
  return 1
}
hits=$(ls runtime/*.c runtime/*.h 2>/dev/null || true)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "check-source: runtime sources belong in a module folder (runtime/*/)" >&2
  status=1
fi
hits=$(for m in $modules; do ls "runtime/$m"; done | grep '\.h$' | sort | uniq -d)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "check-source: two runtime modules hold a header of the same name" >&2
  status=1
fi
# Private headers per module (each .c includes the ones it uses): no catch-all
# internal.h, and the includes among the private headers form no cycle.
if [ -n "$(find runtime -name internal.h)" ] || grep -lE '#include "internal\.h"' $files >/dev/null; then
  grep -nE '#include "internal\.h"' $files || true
  echo "check-source: internal.h is gone: include the module headers you use" >&2
  status=1
fi
edges=$(for m in $modules; do for h in runtime/$m/*.h; do
  [ -e "$h" ] || continue
  b=${h##*/}
  for dep in $(sed -n 's/^#include "\([^"/]*\.h\)".*/\1/p' "$h"); do
    private_header "$dep" && echo "$b $dep"
  done
  echo "$b $b"
done; done)
if ! loop=$(echo "$edges" | tsort 2>&1 >/dev/null); then
  echo "$loop"
  echo "check-source: the includes among the private runtime headers form a cycle" >&2
  status=1
fi
# The sans-I/O layers: sessions (session.c, h1.c), the filter and TLS get
# bytes and the time passed in; descriptors and the clock are conn.c's,
# sock.c's and client.c's.
sansio="runtime/http/session.c runtime/http/h1.c runtime/net/filter.c runtime/net/tls.c runtime/server/server_h1.c"
hits=$(grep -nE '(^|[^_a-zA-Z0-9.>])(socket|connect|bind|listen|accept4?|send|recv|sendto|recvfrom|sendmsg|recvmsg|read|write|readv|writev|close|shutdown|getsockopt|setsockopt|poll|ppoll|select|epoll_[a-z]+|fcntl|ioctl|getaddrinfo)\(' $sansio | grep -v 'conch-allow' || true)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "check-source: socket call in a sans-I/O layer" >&2
  status=1
fi
hits=$(grep -nE '(^|[^_a-zA-Z0-9])(clock_gettime|gettimeofday|time|clock|timespec_get|conch__now_ms|conch__client_now)\(' $sansio | grep -v 'conch-allow' || true)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "check-source: clock read in a sans-I/O layer (pass the time in)" >&2
  status=1
fi
# tools/ is built on the public API: a tool includes conch/ headers, its
# own (a header in its folder) and generated ones (.pb-c.h, .conch.h, .pb.h),
# never a private runtime header, and no exceptions: what a tool needs of
# the runtime is public API (runtime/include/conch/), or the tool's own.
hits=$(find tools -name '*.c' -o -name '*.h' -o -name '*.cc' | sort |
  while read -r f; do
    d=$(dirname "$f")
    sed -n 's/^[ \t]*#[ \t]*include[ \t]*\([<"]\)\([^>"]*\)[>"].*/\1 \2/p' "$f" |
      while read -r kind inc; do
        case "$inc" in
          *.pb-c.h | *.conch.h | *.pb.h) continue ;;
        esac
        if [ "$kind" = '<' ]; then
          # <conch/...> is public; a system header is no runtime's.
          case "$inc" in conch/*) continue ;; esac
          private_header "$inc" || continue
        elif [ -e "$d/$inc" ] && [ "${inc#*..}" = "$inc" ]; then
          continue # its own, not a way out of its folder
        fi
        echo "$f: includes $inc"
      done
  done)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "check-source: tools/ includes only public conch/ headers, its own and generated ones" >&2
  status=1
fi
# Leftovers of patches and editors are not sources.
hits=$(git ls-files 2>/dev/null | grep -E '\.(orig|rej|swp)$|~$' || true)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "check-source: patch or editor leftovers are tracked" >&2
  status=1
fi
# Sockets are sock.c's (and the resolver's, resolve.c): the client's
# connections, the server's listeners and connections and api/'s local
# server probe reach them through it, so that one file holds every socket
# option, EINTR loop and errno rule.
sockets=$(find runtime api -name '*.c' ! -name sock.c ! -name resolve.c)
hits=$(grep -nE '(^|[^_a-zA-Z0-9.>])(socket|socketpair|connect|bind|listen|accept4?|send|recv|sendto|recvfrom|sendmsg|recvmsg|shutdown|getsockopt|setsockopt|getsockname|getpeername)\(' $sockets | grep -v 'conch-allow' || true)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "check-source: socket call outside sock.c (add what you need there)" >&2
  status=1
fi
exit $status
