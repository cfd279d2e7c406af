# shellcheck shell=bash
# Shared by backup.sh and restore.sh (sourced, not run): their command line, what kind of
# registry a REGISTRY argument names, and SQLite's online backup API. The caller sets PROG.

die() { echo "$PROG: $*" >&2; exit 1; }
usage_error() { echo "$PROG: $* (usage: $PROG REGISTRY FILE)" >&2; exit 2; }

# registry_and_file SCRIPT ARGS...: --help prints SCRIPT's header comment and exits; anything
# but two arguments (the registry and the backup file) is a usage error.
registry_and_file() {
    local script=$1; shift
    case ${1:-} in
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$script"; exit 0 ;;
    esac
    (($# == 2)) || usage_error "give the registry and the backup file"
}

# registry_kind REGISTRY: "postgresql" for a PostgreSQL URL (SQLAlchemy's postgresql+DRIVER://
# too), "sqlite" for a path; another URL is an error.
registry_kind() {
    case $1 in
        postgresql://*|postgresql+*://*|postgres://*) echo postgresql ;;
        *://*) die "unsupported registry URL ${1%%://*}://...: give a SQLite file or a postgresql URL" ;;
        *) echo sqlite ;;
    esac
}

# libpq_url URL: the URL as libpq's tools take it (postgresql://, without SQLAlchemy's driver).
libpq_url() {
    echo "postgresql://${1#*://}"
}

# sqlite_copy SOURCE TARGET: SOURCE (opened read-only, checked with PRAGMA integrity_check)
# copied into TARGET page by page through SQLite's backup API -- consistent while another
# connection writes SOURCE, and written through SQLite into TARGET, so a -wal file beside
# TARGET cannot leave a stale page behind. TARGET ends in rollback-journal mode, one standalone
# file (the registry turns WAL on again whenever it opens it).
sqlite_copy() {
    command -v python3 >/dev/null || die "python3 is not installed"
    python3 - "$1" "$2" <<'PY'
import sqlite3
import sys

source, target = sys.argv[1], sys.argv[2]
try:
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    if src.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
        raise sqlite3.DatabaseError("fails PRAGMA integrity_check")
    dst = sqlite3.connect(target)
    with dst:
        src.backup(dst)
    dst.execute("PRAGMA journal_mode=DELETE")
    dst.close()
    src.close()
except sqlite3.Error as exc:
    sys.exit(f"{source}: {exc}")
PY
}
