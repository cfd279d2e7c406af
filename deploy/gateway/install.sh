#!/usr/bin/env bash
# Installs a WheelFed gateway as a systemd service (Raspberry Pi OS bookworm, Python 3.11).
#
#   sudo deploy/gateway/install.sh [--client-id ID] [--engine tflite-runtime|ai-edge-litert]
#   sudo deploy/gateway/install.sh --upgrade
#   sudo deploy/gateway/install.sh --uninstall [--purge]
#   deploy/gateway/install.sh --prefix DIR ...      # into DIR instead of / (tests, images)
#   (--python PYTHON: the Python 3.11 to make the venv with; default python3.11, else python3)
#
# What goes where (under DIR with --prefix):
#   /opt/wheelfed/venv                    a venv with the edge dependencies only: numpy < 2 and
#                                         tflite-runtime 2.14 (or ai-edge-litert), paho-mqtt, cbor2,
#                                         pyserial, cryptography, tflite + flatbuffers (the gateway
#                                         compiles pushed models); wheelfed's gateway packages from
#                                         this source tree (not the aggregator: `wheelfed --help` lists
#                                         the gateway's commands only), without dependencies: no
#                                         server, dev or training packages
#   /etc/wheelfed/gateway.toml            the settings, from gateway.toml here when absent; never
#                                         overwritten (an upgrade keeps the operator's edits)
#   /etc/systemd/system/wheelfed-gateway.service
#   /etc/udev/rules.d/99-wheelfed-serial.rules   /dev/wheelfed-sensor for the sensor's adapter
#   /var/lib/wheelfed                     the window store and models (StateDirectory), owned by
#                                         the system user wheelfed; kept by --upgrade and by
#                                         --uninstall, deleted only by --uninstall --purge
# Logs go to the journal (journalctl -u wheelfed-gateway), which rotates them itself: the gateway
# writes no log file, so there is no logrotate config.
#
# As root without --prefix it also creates the system user, enables the service and reloads udev.
# Under --prefix nothing outside DIR is touched: no user is created (the unit runs as User=wheelfed,
# create it on the target), systemctl and udevadm are not called; the script says so.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "$0")" && pwd)"
SOURCE="$(cd "$SCRIPT_DIR/../.." && pwd)"
PROG="deploy/gateway/install.sh"

say() { printf '==> %s\n' "$*" >&2; }
die() { printf '%s: %s\n' "$PROG" "$1" >&2; exit "${2:-1}"; }  # MESSAGE [EXIT CODE]
usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

PREFIX=""
ENGINE="tflite-runtime"
MODE="install"
PURGE=0
CLIENT_ID="$(hostname -s 2>/dev/null || echo gateway)"
PYTHON=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a folder" 2; PREFIX="$2"; shift 2 ;;
    --engine) [ $# -ge 2 ] || die "--engine needs tflite-runtime or ai-edge-litert" 2; ENGINE="$2"; shift 2 ;;
    --client-id) [ $# -ge 2 ] || die "--client-id needs an id" 2; CLIENT_ID="$2"; shift 2 ;;
    --python) [ $# -ge 2 ] || die "--python needs an interpreter" 2; PYTHON="$2"; shift 2 ;;
    --upgrade) MODE="upgrade"; shift ;;
    --uninstall) MODE="uninstall"; shift ;;
    --purge) PURGE=1; shift ;;
    -h|--help) usage 0 ;;
    *) die "unknown option $1 (see --help)" 2 ;;
  esac
done
case "$ENGINE" in
  tflite-runtime|ai-edge-litert) ;;
  *) die "--engine must be tflite-runtime or ai-edge-litert, got $ENGINE" 2 ;;
esac
[ "$PURGE" -eq 0 ] || [ "$MODE" = uninstall ] || die "--purge goes with --uninstall" 2
[[ "$CLIENT_ID" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$ ]] ||
  die "--client-id $CLIENT_ID: use 1-64 characters from A-Z a-z 0-9 _ . - starting with a letter or digit" 2
if [ -n "$PREFIX" ]; then
  mkdir -p "$PREFIX"
  PREFIX="$(cd "$PREFIX" && pwd)"
  [ "$PREFIX" != / ] || PREFIX=""
fi
SYSTEM=0  # 1: the real root filesystem, as root: users, systemctl and udev are ours to change
if [ -z "$PREFIX" ]; then
  [ "$(id -u)" -eq 0 ] || die "run as root (sudo), or give --prefix DIR to install into a folder" 2
  SYSTEM=1
fi

APP="$PREFIX/opt/wheelfed"
VENV="$APP/venv"
CONFIG_DIR="$PREFIX/etc/wheelfed"
CONFIG="$CONFIG_DIR/gateway.toml"
STATE="$PREFIX/var/lib/wheelfed"
UNIT="$PREFIX/etc/systemd/system/wheelfed-gateway.service"
RULES="$PREFIX/etc/udev/rules.d/99-wheelfed-serial.rules"
USER_NAME="wheelfed"

# Files shipped with absolute paths (/opt/wheelfed, /etc/wheelfed, /var/lib/wheelfed) get DIR in
# front under --prefix, so the tree in DIR runs as it would on a Pi.
render() {
  sed -e "s#/opt/wheelfed#$PREFIX/opt/wheelfed#g" -e "s#/etc/wheelfed#$PREFIX/etc/wheelfed#g" \
      -e "s#/var/lib/wheelfed#$PREFIX/var/lib/wheelfed#g" -e "s#@STATE@#$STATE#g" \
      -e "s#@CONFIG@#$CONFIG_DIR#g" -e "s#@CLIENT_ID@#$CLIENT_ID#g" "$1"
}

find_python311() {
  local candidate
  for candidate in ${PYTHON:+"$PYTHON"} python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
      echo "$candidate"; return 0
    fi
  done
  die "the gateway needs Python 3.11 (tflite-runtime 2.14 has wheels for 3.9-3.11): apt-get install -y python3 python3-venv"
}

# The edge dependencies, read from pyproject.toml so they cannot drift from it: [project]
# dependencies without scipy (the gateway's pipeline and features do not import it; it is 100 MB
# on a Pi) plus the edge-tflite extra's compiler packages, and the chosen interpreter.
edge_requirements() {
  "$1" -I - "$SOURCE/pyproject.toml" "$ENGINE" <<'EOF'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as fh:
    pyproject = tomllib.load(fh)
project = pyproject["project"]
name = lambda req: re.split(r"[<>=!~ ;\[]", req, maxsplit=1)[0].lower()
wanted = [r for r in project["dependencies"] if name(r) not in ("scipy", "numpy")]
wanted += [r for r in project["optional-dependencies"]["edge-tflite"] if name(r) != "ai-edge-litert"]
if sys.argv[2] == "tflite-runtime":
    wanted += ["numpy>=1.26,<2", "tflite-runtime==2.14.*"]  # tflite-runtime 2.14 is built against numpy 1.x
else:
    wanted += ["numpy>=1.26"] + [r.split(";")[0] for r in project["optional-dependencies"]["edge-tflite"]
                                  if name(r) == "ai-edge-litert"]
wanted += pyproject["build-system"]["requires"]  # wheelfed is built here, without build isolation
print("\n".join(wanted))
EOF
}

install_packages() {
  local python="$VENV/bin/python" staging requirements=()
  mapfile -t requirements < <(edge_requirements "$python")
  say "installing the edge dependencies into $VENV: ${requirements[*]}"
  "$python" -m pip install -q --disable-pip-version-check --upgrade "${requirements[@]}"
  # A copy of the gateway's packages (the aggregator stays out): building from the tree itself would
  # leave build/ and egg-info in it.
  staging="$(mktemp -d)"
  # shellcheck disable=SC2064  # expand now: the trap must remove this staging folder
  trap "rm -rf '$staging'" EXIT
  tar -C "$SOURCE" --exclude=__pycache__ -cf - pyproject.toml README.md edge_client shared firmware_bridge |
    tar -C "$staging" -xf -
  say "installing wheelfed $(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$SOURCE/shared/__init__.py") (no extras)"
  "$python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation --force-reinstall "$staging"
  "$python" -I - "$ENGINE" <<'EOF'
import sys

import numpy

from shared.model.tflite import load_interpreter

load_interpreter()  # the interpreter the engine option asked for runs with this numpy
if sys.argv[1] == "tflite-runtime":
    assert numpy.__version__.startswith("1."), f"numpy {numpy.__version__}: tflite-runtime needs numpy < 2"
for banned in ("aggregator", "xgboost", "sklearn", "pandas", "scipy", "fastapi", "sqlalchemy", "tensorflow"):
    try:
        __import__(banned)
    except ImportError:
        continue
    raise SystemExit(f"{banned} is installed in the gateway's venv: it must hold the edge dependencies only")
EOF
}

install_files() {
  mkdir -p "$CONFIG_DIR" "$STATE" "$(dirname "$UNIT")" "$(dirname "$RULES")"
  if [ -f "$CONFIG" ]; then
    say "kept $CONFIG (yours)"
  else
    render "$SCRIPT_DIR/gateway.toml" > "$CONFIG"
    chmod 0640 "$CONFIG"
    say "wrote $CONFIG: set broker.host, trust and the certificates, then run:" \
        "$VENV/bin/wheelfed gateway --config $CONFIG --check"
  fi
  render "$SCRIPT_DIR/wheelfed-gateway.service" > "$UNIT"
  chmod 0644 "$UNIT"
  install -m 0644 "$SCRIPT_DIR/99-wheelfed-serial.rules" "$RULES"
  say "wrote $UNIT and $RULES"
}

system_user() {
  if [ "$SYSTEM" -eq 0 ]; then
    say "--prefix: not creating the system user $USER_NAME (create it on the target:" \
        "useradd --system --user-group --groups dialout --home-dir /var/lib/wheelfed --shell /usr/sbin/nologin $USER_NAME)"
    return 0
  fi
  if ! id "$USER_NAME" >/dev/null 2>&1; then
    say "creating the system user $USER_NAME (groups: dialout)"
    getent group dialout >/dev/null || groupadd --system dialout
    useradd --system --user-group --groups dialout --home-dir /var/lib/wheelfed --shell /usr/sbin/nologin \
      "$USER_NAME"
  fi
  chown -R "$USER_NAME:$USER_NAME" "$STATE"
  chmod 0750 "$STATE"
  chgrp "$USER_NAME" "$CONFIG_DIR" "$CONFIG"
}

activate() {
  if [ "$SYSTEM" -eq 0 ]; then
    say "--prefix: not calling systemctl or udevadm; on the target: systemctl daemon-reload;" \
        "udevadm control --reload-rules; systemctl enable --now wheelfed-gateway"
    return 0
  fi
  if command -v udevadm >/dev/null 2>&1; then
    if ! { udevadm control --reload-rules && udevadm trigger --subsystem-match=tty; }; then
      say "udev reload failed (replug the adapter)"
    fi
  fi
  if command -v systemctl >/dev/null 2>&1; then
    systemctl daemon-reload
    systemctl enable wheelfed-gateway.service
    if systemctl is-active --quiet wheelfed-gateway.service; then
      systemctl restart wheelfed-gateway.service
      say "restarted wheelfed-gateway"
    else
      say "enabled wheelfed-gateway; start it once gateway.toml checks out: systemctl start wheelfed-gateway"
    fi
  fi
}

uninstall() {
  if [ "$SYSTEM" -eq 1 ] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now wheelfed-gateway.service 2>/dev/null || true
  fi
  rm -f "$UNIT" "$RULES"
  rm -rf "$APP"
  if [ "$SYSTEM" -eq 1 ] && command -v systemctl >/dev/null 2>&1; then
    systemctl daemon-reload
  fi
  say "removed the service, the udev rule and $APP"
  if [ "$PURGE" -eq 1 ]; then
    rm -rf "$STATE" "$CONFIG_DIR"
    if [ "$SYSTEM" -eq 1 ] && id "$USER_NAME" >/dev/null 2>&1; then
      userdel "$USER_NAME" || say "could not remove the user $USER_NAME"
    fi
    say "--purge: removed $STATE (windows, models) and $CONFIG_DIR"
  else
    say "kept $STATE (windows, models) and $CONFIG_DIR; --uninstall --purge removes them"
  fi
}

case "$MODE" in
  uninstall)
    uninstall
    ;;
  install|upgrade)
    if [ "$MODE" = install ] && [ -x "$VENV/bin/python" ]; then
      die "already installed in $APP: use --upgrade (keeps $STATE and $CONFIG)"
    fi
    if [ "$MODE" = upgrade ] && [ ! -x "$VENV/bin/python" ]; then
      die "nothing to upgrade in $APP: install first"
    fi
    if [ ! -x "$VENV/bin/python" ]; then
      say "creating $VENV"
      mkdir -p "$APP"
      "$(find_python311)" -m venv "$VENV"
    fi
    install_packages
    install_files
    system_user
    activate
    say "$MODE done: $VENV/bin/wheelfed gateway --config $CONFIG --check"
    ;;
esac
