#!/bin/sh
# Makes throwaway TLS material for the interop tests in OUTDIR:
#   ca.pem / ca.key          a self-signed test CA
#   server.pem / server.key  server cert signed by the CA; SAN IP:127.0.0.1,
#                            IP:::1, DNS:conch-test.invalid -- deliberately
#                            NOT localhost, so https://localhost:<port> must
#                            fail hostname verification
#   client.pem / client.key  client cert (extendedKeyUsage clientAuth) signed
#                            by the same CA
# Keys are EC P-256, certificates valid for 30 days from now.
# Usage: make-certs.sh OUTDIR
set -eu

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
out=$1
mkdir -p "$out"
cd "$out"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ossl() {
  openssl "$@" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
}

newkey() {
  ossl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"
  chmod 600 "$1"
}

cat >"$tmp/ca.ext" <<'EOF'
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
cat >"$tmp/server.ext" <<'EOF'
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, IP:::1, DNS:conch-test.invalid
authorityKeyIdentifier = keyid
subjectKeyIdentifier = hash
EOF
cat >"$tmp/client.ext" <<'EOF'
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
subjectKeyIdentifier = hash
EOF

newkey ca.key
ossl req -new -key ca.key -subj "/CN=conch test CA" -out "$tmp/ca.csr"
ossl x509 -req -in "$tmp/ca.csr" -signkey ca.key -days 30 \
  -extfile "$tmp/ca.ext" -out ca.pem

sign() { # name subject
  newkey "$1.key"
  ossl req -new -key "$1.key" -subj "$2" -out "$tmp/$1.csr"
  ossl x509 -req -in "$tmp/$1.csr" -CA ca.pem -CAkey ca.key \
    -set_serial "0x$(openssl rand -hex 8)" -days 30 \
    -extfile "$tmp/$1.ext" -out "$1.pem"
}
sign server "/CN=conch-test.invalid"
sign client "/CN=conch test client"

ossl verify -CAfile ca.pem server.pem >/dev/null
ossl verify -CAfile ca.pem client.pem >/dev/null
