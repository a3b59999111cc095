#!/bin/sh
# The test's stand-in for the official redis image's entrypoint, on Debian's redis-server:
# no protected mode (the server is reached from other containers, as the official image allows),
# and the server runs as the redis user in /data.
set -eu
if [ "${1:-}" = redis-server ]; then
  shift
  set -- redis-server --protected-mode no "$@"
  mkdir -p /data && chown redis:redis /data
  exec runuser -u redis -- "$@"
fi
exec "$@"
