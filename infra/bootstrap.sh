#!/usr/bin/env bash
# Installs what `make demo` and `make test` need from Debian when it is missing: PostgreSQL 15
# (server, contrib with test_decoding, pg_waldump), a Java runtime for Spark and the jars Spark
# SQL on the mirrors needs. Idempotent.
set -euo pipefail

need=()
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql-15 postgresql-contrib)
[ -x /usr/lib/postgresql/15/bin/pg_waldump ] || need+=(postgresql-15)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -x /usr/bin/python3.11 ] || need+=(python3.11)
/usr/bin/python3.11 -c "import ensurepip" >/dev/null 2>&1 || need+=(python3.11-venv)
[ -e /usr/include/python3.11/Python.h ] || need+=(python3.11-dev)
# the snapshot's compiled COPY reader links libpq (cdclake/snapshot/_copyout.pyx)
[ -e /usr/include/postgresql/libpq-fe.h ] || need+=(libpq-dev)
# Spark SQL on the mirrors: jarjar relocates Iceberg's Jackson; JDBC drivers for the catalog
[ -e /usr/share/java/jarjar.jar ] || need+=(libjarjar-java)
[ -e /usr/share/java/sqlite-jdbc.jar ] || need+=(libxerial-sqlite-jdbc-java)
[ -e /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)

if [ ${#need[@]} -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# Debian starts a default cluster on 5432; cdclake runs its own on free ports, so leave it be.
