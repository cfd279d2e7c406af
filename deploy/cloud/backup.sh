#!/usr/bin/env bash
# Back up the WheelFed registry (models, deployments, gateways, jobs and their rounds,
# schedules, promotions) while the server runs:
#
#   deploy/cloud/backup.sh REGISTRY FILE
#
# REGISTRY is what `wheelfed server --registry` takes: a SQLite file, or a PostgreSQL URL
# (postgresql+psycopg://USER@HOST[:PORT]/DB; the password from $PGPASSWORD or ~/.pgpass, never the
# command line). FILE gets
#   - PostgreSQL: pg_dump's custom format (pg_dump --format=custom), one consistent snapshot;
#   - SQLite: a copy made with SQLite's online backup API (python3's sqlite3 module), consistent
#     even while the server writes (a plain cp of a WAL database is not).
# FILE must not exist (a backup is never overwritten); it is written to FILE.partial first and
# renamed when complete, mode 0600. Restore with deploy/cloud/restore.sh REGISTRY FILE.
# Prints one line: "backed up REGISTRY to FILE (N bytes)".
set -euo pipefail

PROG=deploy/cloud/backup.sh
# shellcheck source=deploy/cloud/registry-lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/registry-lib.sh"
registry_and_file "$0" "$@"
registry=$1
file=$2
[[ ! -e $file ]] || die "$file exists: give a new file name (backups are never overwritten)"
[[ -d $(dirname -- "$file") ]] || die "$(dirname -- "$file") is not a directory"

umask 077
partial=$file.partial
trap 'rm -f "$partial"' EXIT

target=$(registry_kind "$registry")
case $target in
    postgresql)
        command -v pg_dump >/dev/null || die "pg_dump is not installed (apt-get install postgresql-client)"
        pg_dump --format=custom --no-owner --no-privileges --dbname="$(libpq_url "$registry")" --file="$partial" \
            2>"$partial.err" ||
            { msg=$(grep -m1 . "$partial.err" || true); rm -f "$partial.err"; die "pg_dump failed: ${msg:-no message}"; }
        rm -f "$partial.err"
        ;;
    sqlite)
        [[ -f $registry ]] || die "$registry: no such SQLite file"
        sqlite_copy "$registry" "$partial" || die "SQLite backup of $registry failed"
        ;;
esac
mv -- "$partial" "$file"
trap - EXIT
echo "backed up $registry to $file ($(wc -c <"$file") bytes)"
