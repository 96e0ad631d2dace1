#!/bin/sh
# The proxy's entrypoint (docker-compose.yml, service `proxy`): serve the certificate given
# in $TLS_DIR (tls.crt + tls.key), else one signed by Caddy's own CA, made on first start
# and kept in the caddy_data volume (docs/deploy.md, "TLS").
set -eu
here=$(dirname "$0")
cert="$TLS_DIR/tls.crt"
key="$TLS_DIR/tls.key"
if [ -s "$cert" ] && [ -s "$key" ]; then
	PORTAL_TLS="$cert $key"
	echo "proxy: serving the certificate $cert for $PUBLIC_HOST"
elif [ -e "$cert" ] || [ -e "$key" ]; then
	echo "proxy: give both $cert and $key (PEM), or neither" >&2
	exit 1
else
	PORTAL_TLS=internal
	echo "proxy: no certificate in $TLS_DIR: Caddy's local CA signs one for $PUBLIC_HOST" \
		"(its root: $XDG_DATA_HOME/caddy/pki/authorities/local/root.crt)"
fi
export PORTAL_TLS
exec caddy run --config "$here/Caddyfile" --adapter caddyfile
