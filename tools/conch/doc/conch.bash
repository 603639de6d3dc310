# bash completion for conch (tools/conch/main.c); tests/cli/test_docs.sh
# checks that it offers every option of `conch --help` and of each
# `conch COMMAND --help`.
_conch() {
  local cur prev cmd i
  cur=${COMP_WORDS[COMP_CWORD]}
  prev=${COMP_WORDS[COMP_CWORD - 1]}
  local global="--url --token --user --timeout --cacert --http1.1 --http2
    --protocol --codec --help --version"
  local commands="run start ps kill attach pty serve help version"
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      --) return 0 ;;
      --url | --token | --user | --timeout | --cacert | --protocol | --codec) ((i++)) ;;
      -*) ;;
      *) cmd=${COMP_WORDS[i]}; break ;;
    esac
  done
  case $prev in
    --protocol) COMPREPLY=($(compgen -W "connect grpc grpc-web" -- "$cur")); return 0 ;;
    --codec) COMPREPLY=($(compgen -W "proto json" -- "$cur")); return 0 ;;
    --signal | -s) COMPREPLY=($(compgen -W "TERM KILL" -- "$cur")); return 0 ;;
    --cacert | --tls-cert | --tls-key | --access-token-file)
      COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
    --cwd | --workdir) COMPREPLY=($(compgen -d -- "$cur")); return 0 ;;
    --user) COMPREPLY=($(compgen -u -- "$cur")); return 0 ;;
    --url | --token | --timeout | --env | --tag | --listen | --access-token | \
      --allow-uid | --allow-user) return 0 ;;
  esac
  local opts
  case $cmd in
    "") opts="$global $commands" ;;
    run) opts="--cwd --env --tag --stdin --help $global" ;;
    start) opts="--cwd --env --tag --help $global" ;;
    ps) opts="--json --help $global" ;;
    kill) opts="--signal -s --help $global" ;;
    attach | pty) opts="--help $global" ;;
    serve) opts="--listen --access-token-file --access-token --no-token
      --tls-cert --tls-key --allow-uid --allow-user --user --workdir --stop
      --help" ;;
    help) opts=$commands ;;
    *) return 0 ;;
  esac
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -o default -F _conch conch
