# The start every bash CLI suite shares (sourced, after the suite's own
# skips): a private directory $tmp, removed at the end with the peers the
# suite put in $pids killed (on EXIT; INT, TERM and HUP exit 143 through
# it); $fails counted by check and has; rc, a command's exit status.

tmp=$(mktemp -d)
fails=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' INT TERM HUP

check() { # name expected actual
  if [ "$2" = "$3" ]; then
    echo "ok   $1"
  else
    echo "FAIL $1: expected [$2], got [$3]"
    fails=$((fails + 1))
  fi
}
has() { # name needle haystack
  case $3 in
  *"$2"*) echo "ok   $1" ;;
  *)
    echo "FAIL $1: [$2] not in [$3]"
    fails=$((fails + 1))
    ;;
  esac
}
rc() { "$@" >/dev/null 2>&1; echo $?; }
