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
die() { echo "$PROG: $*" >&2; exit 1; }
usage_error() { echo "$PROG: $* (usage: $PROG REGISTRY FILE)" >&2; exit 2; }

case ${1:-} in
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
esac
(($# == 2)) || usage_error "give the registry and the backup file"
registry=$1
file=$2
[[ ! -e $file ]] || die "$file exists: give a new file name (backups are never overwritten)"
[[ -d $(dirname -- "$file") ]] || die "$(dirname -- "$file") is not a directory"

umask 077
partial=$file.partial
trap 'rm -f "$partial"' EXIT

case $registry in
    postgresql://*|postgresql+*://*|postgres://*)
        command -v pg_dump >/dev/null || die "pg_dump is not installed (apt-get install postgresql-client)"
        # libpq wants postgresql://, not SQLAlchemy's driver suffix
        url=postgresql://${registry#*://}
        pg_dump --format=custom --no-owner --no-privileges --dbname="$url" --file="$partial" \
            2>"$partial.err" ||
            { msg=$(grep -m1 . "$partial.err" || true); rm -f "$partial.err"; die "pg_dump failed: ${msg:-no message}"; }
        rm -f "$partial.err"
        ;;
    *://*)
        die "unsupported registry URL ${registry%%://*}://...: give a SQLite file or a postgresql URL"
        ;;
    *)
        [[ -f $registry ]] || die "$registry: no such SQLite file"
        command -v python3 >/dev/null || die "python3 is not installed"
        python3 - "$registry" "$partial" <<'PY' || die "SQLite backup of $registry failed"
import sqlite3
import sys

source, target = sys.argv[1], sys.argv[2]
try:
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(target)
    with dst:
        src.backup(dst)
    # the copy is a standalone file: no -wal/-shm beside it
    dst.execute("PRAGMA journal_mode=DELETE")
    dst.close()
    src.close()
except sqlite3.Error as exc:
    print(f"deploy/cloud/backup.sh: {source}: {exc}", file=sys.stderr)
    sys.exit(1)
PY
        ;;
esac
mv -- "$partial" "$file"
trap - EXIT
echo "backed up $registry to $file ($(wc -c <"$file") bytes)"
