#!/usr/bin/env bash
# OSWorld's applications for the `office` sandbox profile (SANDBOX_OFFICE=1): LibreOffice Calc, Impress
# and Writer, GIMP, VLC, Thunderbird, PulseAudio's tools (pactl), the en_US.UTF-8 locale OSWorld's
# Ubuntu image runs in (a correct `ls` answer scored 0 under the C locale: it sorts differently) and the
# fonts its documents use, and what OSWorld's tasks install as root in their set-up (expect, unzip, the
# pysrt module: our desktops give no root, so they have them already; agent_core/tasks/osworld_tables.py
# ROOT_INSTALLS). Only what is missing is installed; a second run does nothing.
set -euo pipefail
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root (or sudo) to install: $*" >&2; exit 1; fi
}
log() { printf '\033[1m[office-apps]\033[0m %s\n' "$*" >&2; }
need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
for pkg in libreoffice-calc libreoffice-impress libreoffice-writer libreoffice-gtk3 gimp vlc thunderbird \
  pulseaudio-utils locales fonts-liberation fonts-dejavu-core fonts-crosextra-carlito fonts-crosextra-caladea \
  expect unzip python3-pysrt; do
  have_pkg "$pkg" || need+=("$pkg")
done
start=$SECONDS
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! locale -a 2>/dev/null | grep -qi '^en_US\.utf-\?8$'; then
  log "generating the en_US.UTF-8 locale"
  as_root sed -i 's/^# *\(en_US.UTF-8 UTF-8\)/\1/' /etc/locale.gen
  as_root locale-gen >/dev/null
fi
for cmd in libreoffice gimp vlc thunderbird pactl expect unzip; do
  have_cmd "$cmd" || { echo "office-apps: $cmd is still missing after the install" >&2; exit 1; }
done
/usr/bin/python3 -c "import pysrt" || { echo "office-apps: python3's pysrt is still missing" >&2; exit 1; }
log "ready in $((SECONDS - start)) s"
