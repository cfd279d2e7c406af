#!/usr/bin/env bash
# Keep the certificate revocation list of a WheelFed broker (mosquitto's crlfile):
#
#   deploy/cloud/crl.sh [-o DIR] [--days N] [--revoke CLIENT_ID]...
#
# DIR (default ./certs) is the folder deploy/certs made; it needs ca.key. Writes DIR/crl.pem,
# signed by the CA, listing every certificate revoked so far (none at first: run it once without
# --revoke before the broker's first start, since mosquitto refuses to start without the file).
# --revoke CLIENT_ID revokes DIR/CLIENT_ID.crt and moves the pair to DIR/revoked/ (so that
# `deploy/certs CLIENT_ID` can issue a new one: rotation) -- a retired or lost gateway, or a
# rotated certificate. The revocation database is DIR/crl/ (openssl ca's index.txt).
# --days N: the list's validity (default 825, as deploy/certs's certificates); an expired list
# makes the broker refuse every client, so run this again (without --revoke) before then.
# mosquitto reads crl.pem when it starts: restart the broker afterwards.
# Prints one line per revoked certificate and one for the list.
set -euo pipefail

PROG=deploy/cloud/crl.sh
CLIENT_ID_PATTERN='^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'
die() { echo "$PROG: $*" >&2; exit 1; }
usage_error() { echo "$PROG: $* (usage: $PROG [-o DIR] [--days N] [--revoke CLIENT_ID]...)" >&2; exit 2; }

out=certs
days=825
revoke=()
while (($#)); do
    case $1 in
        -o|--out) (($# >= 2)) || usage_error "$1 needs a directory"; out=$2; shift 2 ;;
        --days) if (($# < 2)) || [[ ! $2 =~ ^[1-9][0-9]*$ ]]; then usage_error "--days needs a positive number"; fi
                days=$2; shift 2 ;;
        --revoke) (($# >= 2)) || usage_error "--revoke needs a client id"
                  [[ $2 =~ $CLIENT_ID_PATTERN && $2 != ca && $2 != broker ]] ||
                      usage_error "--revoke $2: not a client id"
                  revoke+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        *) usage_error "unknown argument $1" ;;
    esac
done
command -v openssl >/dev/null || die "openssl is not installed (apt-get install openssl)"
[[ -f $out/ca.crt ]] || die "$out/ca.crt is missing (deploy/certs -o $out makes it)"
[[ -f $out/ca.key ]] || die "$out/ca.key is missing: the list is signed by the CA's key (copy it back for this)"
for id in "${revoke[@]}"; do
    [[ -f $out/$id.crt ]] || die "$out/$id.crt is missing: nothing to revoke for $id"
done

umask 077
db=$out/crl
mkdir -p "$db" "$out/revoked"
[[ -f $db/index.txt ]] || : >"$db/index.txt"
[[ -f $db/crlnumber ]] || echo 01 >"$db/crlnumber"
conf=$(mktemp)
err=$(mktemp)
trap 'rm -f "$conf" "$err"' EXIT
# The CA section openssl ca needs for -revoke and -gencrl (no certificates are issued here).
cat >"$conf" <<CNF
[ca]
default_ca = wheelfed
[wheelfed]
database = $db/index.txt
crlnumber = $db/crlnumber
certificate = $out/ca.crt
private_key = $out/ca.key
default_md = sha256
default_crl_days = $days
CNF

for id in "${revoke[@]}"; do
    serial=$(openssl x509 -in "$out/$id.crt" -noout -serial | cut -d= -f2)
    openssl ca -config "$conf" -revoke "$out/$id.crt" -crl_reason superseded >/dev/null 2>"$err" ||
        die "openssl could not revoke $out/$id.crt: $(grep -m1 -iv '^using configuration' "$err" || echo 'no message')"
    mv -- "$out/$id.crt" "$out/revoked/$id-$serial.crt"
    if [[ -f $out/$id.key ]]; then mv -- "$out/$id.key" "$out/revoked/$id-$serial.key"; fi
    echo "revoked $id (serial $serial): pair moved to $out/revoked/"
done
openssl ca -config "$conf" -gencrl -out "$out/crl.pem.new" >/dev/null 2>"$err" ||
    die "openssl could not write the list: $(grep -m1 -iv '^using configuration' "$err" || echo 'no message')"
chmod 644 "$out/crl.pem.new"
mv -- "$out/crl.pem.new" "$out/crl.pem"
echo "wrote $out/crl.pem ($(grep -c . "$db/index.txt") revoked, valid $days days): restart the broker to apply it"
