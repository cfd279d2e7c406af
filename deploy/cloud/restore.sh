#!/usr/bin/env bash
# Restore the WheelFed registry from a backup made by deploy/cloud/backup.sh:
#
#   deploy/cloud/restore.sh REGISTRY FILE
#
# REGISTRY as for backup.sh (a SQLite file or a PostgreSQL URL, password from $PGPASSWORD or
# ~/.pgpass). Stop the server first (docker compose stop server, or systemctl stop
# wheelfed-server): the registry's content is replaced by the backup's, whatever it holds now.
#   - PostgreSQL: pg_restore --clean --if-exists in one transaction: the registry's tables are
#     dropped and recreated from FILE; on any error nothing changes. The database must exist
#     (it may be empty: a new server's, or one just recreated).
#   - SQLite: FILE (checked with PRAGMA integrity_check first) is copied into REGISTRY page by
#     page with SQLite's backup API, which writes through SQLite, so a -wal file beside the
#     registry cannot leave a stale page behind; REGISTRY is created if missing.
# A backup of the other kind (a pg_dump file for a SQLite registry, or the reverse) is refused.
# Prints one line: "restored REGISTRY from FILE".
set -euo pipefail

PROG=deploy/cloud/restore.sh
# shellcheck source=deploy/cloud/registry-lib.sh
. "$(dirname -- "${BASH_SOURCE[0]}")/registry-lib.sh"
registry_and_file "$0" "$@"
registry=$1
file=$2
[[ -f $file && -r $file ]] || die "$file: no such backup file (or not readable)"

# What the file is, from its first bytes: pg_dump's custom format starts with PGDMP.
magic=$(head -c 15 -- "$file" | tr -d '\0')
case $magic in
    PGDMP*) kind=postgresql ;;
    "SQLite format 3") kind=sqlite ;;
    *) die "$file is neither a pg_dump custom-format file nor a SQLite database (not made by backup.sh)" ;;
esac

target=$(registry_kind "$registry")
case $target in
    postgresql)
        [[ $kind == postgresql ]] || die "$file is a SQLite backup; $registry is a PostgreSQL registry"
        command -v pg_restore >/dev/null || die "pg_restore is not installed (apt-get install postgresql-client)"
        err=$(mktemp)
        trap 'rm -f "$err"' EXIT
        pg_restore --clean --if-exists --no-owner --no-privileges --single-transaction --exit-on-error \
            --dbname="$(libpq_url "$registry")" "$file" 2>"$err" ||
            die "pg_restore failed, the registry is unchanged: $(grep -m1 . "$err" || echo 'no message')"
        ;;
    sqlite)
        [[ $kind == sqlite ]] || die "$file is a PostgreSQL backup; $registry is a SQLite registry"
        [[ -d $(dirname -- "$registry") ]] || die "$(dirname -- "$registry") is not a directory"
        sqlite_copy "$file" "$registry" || die "SQLite restore into $registry failed"
        ;;
esac
echo "restored $registry from $file"
