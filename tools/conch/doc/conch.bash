# bash completion for conch (tools/conch/main.c); tests/cli/test_docs.sh
# checks that it offers every option of `conch --help` and of each
# `conch COMMAND --help`.

# The running processes for kill and attach: "pid" and "@tag" words from
# `conch ps --json`, asked of the server the command line names (with its
# URL, token and transport options, or the CONCH_* variables).  Without a
# URL only a local server that already runs is asked (completing starts
# none), and no server gets more than 3 s.
_conch_procs() {
  local conn=() w j sock
  for ((j = 1; j < COMP_CWORD; j++)); do
    w=${COMP_WORDS[j]}
    case $w in
      --url | --token | --token-file | --user | --cacert | --protocol | --codec)
        conn+=("$w" "${COMP_WORDS[j + 1]}"); ((j++)) ;;
      --url=* | --token=* | --token-file=* | --user=* | --cacert=* | \
        --protocol=* | --codec=* | --http1.1 | --http2) conn+=("$w") ;;
    esac
  done
  if [[ -z ${CONCH_URL-} && " ${conn[*]} " != *" --url"* ]]; then
    sock=${TMPDIR:-/tmp}/conch-$(id -u)/serve.sock
    [[ -n ${XDG_RUNTIME_DIR-} && -O $XDG_RUNTIME_DIR ]] &&
      sock=$XDG_RUNTIME_DIR/conch/serve.sock
    [[ -S $sock ]] || return 0
  fi
  timeout 3 "${COMP_WORDS[0]}" "${conn[@]}" ps --json 2>/dev/null |
    sed -n -e 's/^{"pid":\([0-9]*\),"tag":"\([^"\\]*\)".*/\1 @\2/p' \
      -e 's/^{"pid":\([0-9]*\),"tag":null.*/\1/p'
}

_conch() {
  local cur prev cmd i
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD - 1]}
  local global="--url --token --token-file --user --timeout --cacert
    --http1.1 --http2 --protocol --codec --json-errors --help --version"
  local commands="run start ps kill attach pty cp ls stat mkdir mv rm watch call
    serve help version"
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      --) return 0 ;;
      --url | --token | --token-file | --user | --timeout | --cacert | --protocol | \
        --codec) ((i++)) ;;
      -*) ;;
      *) cmd=${COMP_WORDS[i]}; break ;;
    esac
  done
  case $prev in
    --protocol) COMPREPLY=($(compgen -W "connect grpc grpc-web" -- "$cur")); return 0 ;;
    --codec) COMPREPLY=($(compgen -W "proto json" -- "$cur")); return 0 ;;
    --signal | -s) COMPREPLY=($(compgen -W "TERM KILL" -- "$cur")); return 0 ;;
    --cacert | --tls-cert | --tls-key | --access-token-file | --schema)
      COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
    --cwd | --workdir | --proto-path) COMPREPLY=($(compgen -d -- "$cur")); return 0 ;;
    --user) COMPREPLY=($(compgen -u -- "$cur")); return 0 ;;
    --token-file) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
    --url | --token | --timeout | --env | --tag | --listen | --access-token | \
      --allow-uid | --allow-user | --max-output | --depth | -d | -H | \
      --max-time | --service-config | --target) return 0 ;;
    --lb) COMPREPLY=($(compgen -W "pick_first round_robin" -- "$cur")); return 0 ;;
  esac
  # A process for kill and attach: PID or @TAG.  "@" breaks words in
  # bash (COMP_WORDBREAKS), so "@we" may come as "@" then "we".
  if [[ ($cmd == kill || $cmd == attach) && $cur != -* ]]; then
    local procs
    procs=$(_conch_procs)
    if [[ $prev == @ && $cur != @* ]]; then
      COMPREPLY=($(compgen -W "$(printf '%s\n' $procs | sed -n 's/^@//p')" \
        -- "$cur"))
    else
      COMPREPLY=($(compgen -W "$procs" -- "$cur"))
    fi
    return 0
  fi
  local opts
  case $cmd in
    "") opts="$global $commands" ;;
    run) opts="--cwd --env --tag --stdin --max-output --help $global" ;;
    start) opts="--cwd --env --tag --help $global" ;;
    ps) opts="--json --help $global" ;;
    kill) opts="--signal -s --help $global" ;;
    attach | pty | stat | mv | rm) opts="--help $global" ;;
    ls) opts="-l --depth --help $global" ;;
    mkdir) opts="-p --help $global" ;;
    cp) opts="-r --help $global" ;;
    watch) opts="-r --json --help $global" ;;
    call) opts="-d -H --schema --proto-path --max-time --service-config --lb --target list describe --help
      $global" ;;
    serve) opts="--listen --access-token-file --access-token --no-token
      --tls-cert --tls-key --allow-uid --allow-user --user --workdir --stop
      --help" ;;
    help) opts=$commands ;;
    *) return 0 ;;
  esac
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -o default -F _conch conch
