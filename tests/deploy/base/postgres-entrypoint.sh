#!/bin/sh
# The test's stand-in for the official postgres image's entrypoint, on Debian's postgresql-15:
# a first start creates the cluster in PGDATA with POSTGRES_USER (password POSTGRES_PASSWORD,
# scram over TCP from any address) and the database POSTGRES_DB; every start runs postgres as
# the postgres user. Enough for docker-compose.yml, nothing more.
set -eu
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
BIN=/usr/lib/postgresql/15/bin
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /run/postgresql
  chown -R postgres:postgres "$PGDATA" /run/postgresql
  chmod 700 "$PGDATA"
  exec runuser -u postgres -- "$0" "$@"
fi
user="${POSTGRES_USER:-postgres}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}" >"$pwfile"
  "$BIN/initdb" -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  db="${POSTGRES_DB:-$user}"
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE \"$db\" OWNER \"$user\";" | "$BIN/postgres" --single -D "$PGDATA" postgres >/dev/null
  fi
fi
exec "$BIN/postgres" -D "$PGDATA" "$@"
