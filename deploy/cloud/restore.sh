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
die() { echo "$PROG: $*" >&2; exit 1; }
usage_error() { echo "$PROG: $* (usage: $PROG REGISTRY FILE)" >&2; exit 2; }

case ${1:-} in
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
esac
(($# == 2)) || usage_error "give the registry and the backup file"
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

case $registry in
    postgresql://*|postgresql+*://*|postgres://*)
        [[ $kind == postgresql ]] || die "$file is a SQLite backup; $registry is a PostgreSQL registry"
        command -v pg_restore >/dev/null || die "pg_restore is not installed (apt-get install postgresql-client)"
        url=postgresql://${registry#*://}
        err=$(mktemp)
        trap 'rm -f "$err"' EXIT
        pg_restore --clean --if-exists --no-owner --no-privileges --single-transaction --exit-on-error \
            --dbname="$url" "$file" 2>"$err" ||
            die "pg_restore failed, the registry is unchanged: $(grep -m1 . "$err" || echo 'no message')"
        ;;
    *://*)
        die "unsupported registry URL ${registry%%://*}://...: give a SQLite file or a postgresql URL"
        ;;
    *)
        [[ $kind == sqlite ]] || die "$file is a PostgreSQL backup; $registry is a SQLite registry"
        [[ -d $(dirname -- "$registry") ]] || die "$(dirname -- "$registry") is not a directory"
        command -v python3 >/dev/null || die "python3 is not installed"
        python3 - "$file" "$registry" <<'PY' || die "SQLite restore into $registry failed"
import sqlite3
import sys

source, target = sys.argv[1], sys.argv[2]
try:
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    if src.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
        raise sqlite3.DatabaseError(f"{source} fails PRAGMA integrity_check")
    dst = sqlite3.connect(target)
    with dst:
        src.backup(dst)
    # the registry runs in WAL mode (aggregator/registry.py); leave it checkpointed
    dst.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    dst.close()
    src.close()
except sqlite3.Error as exc:
    print(f"deploy/cloud/restore.sh: {exc}", file=sys.stderr)
    sys.exit(1)
PY
        ;;
esac
echo "restored $registry from $file"
