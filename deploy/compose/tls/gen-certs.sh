#!/usr/bin/env bash
# Generate a throw-away CA and one server certificate for the compose NATS
# nodes (nats, nats1, nats2, nats3, localhost, 127.0.0.1), for trying TLS
# locally:
#
#   deploy/compose/tls/gen-certs.sh
#   make up COMPOSE_FILES="docker-compose.yml docker-compose.tls.yml"
#
# Writes ca.pem, server.pem and server-key.pem next to this script. The key
# is world-readable so the non-root containers can read it through a bind
# mount: fine for a laptop, wrong for anything else. In production, issue
# certificates from your own CA and mount them with proper ownership.
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
cd "$dir"
days=${DAYS:-30}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
	-subj "/CN=flyball dev CA" -keyout ca-key.pem -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-subj "/CN=flyball nats" -keyout server-key.pem -out server.csr 2>/dev/null
cat >server.ext <<EXT
subjectAltName = DNS:nats, DNS:nats1, DNS:nats2, DNS:nats3, DNS:localhost, IP:127.0.0.1
extendedKeyUsage = serverAuth, clientAuth
EXT
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial \
	-days "$days" -extfile server.ext -out server.pem 2>/dev/null
rm -f server.csr server.ext ca.srl
chmod 0644 ca.pem server.pem server-key.pem
chmod 0600 ca-key.pem
echo "wrote $dir/{ca.pem,server.pem,server-key.pem} (valid $days days)"
