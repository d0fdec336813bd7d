#!/usr/bin/env bash
# Idempotent set-up for `make run` (default) or `make test` (argument "test"):
# the Debian packages that are missing, a virtual environment, pip and npm installs, static vendor files.
# A second run with nothing changed does no network work.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-run}
PY=${PYTHON:-python3}
mkdir -p var

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root (or sudo) to install: $*" >&2; exit 1; fi
}

# --- Debian packages, only those missing --------------------------------------------------------
need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_cmd redis-server || need+=(redis-server)
have_cmd curl || need+=(curl)
have_cmd node || need+=(nodejs)
have_cmd npm || need+=(npm)
$PY -c "import venv, ensurepip" 2>/dev/null || need+=(python3-venv)
# The sandbox host: X server, VNC, window manager, desktop apps, confinement, Android's adb.
have_cmd Xvfb || need+=(xvfb)
have_cmd x11vnc || need+=(x11vnc)
have_cmd bwrap || need+=(bubblewrap)
have_cmd xdotool || need+=(xdotool)
have_cmd openbox || need+=(openbox)
have_cmd xterm || need+=(xterm)
have_cmd mousepad || need+=(mousepad)
have_cmd pcmanfm || need+=(pcmanfm)
have_cmd chromium || need+=(chromium)
have_cmd adb || need+=(adb)
have_cmd xdpyinfo || need+=(x11-utils)
have_cmd xsetroot || need+=(x11-xserver-utils)  # the live-view tests and bench paint the root window
have_cmd dbus-launch || need+=(dbus-x11)
[ -e /usr/libexec/at-spi-bus-launcher ] || need+=(at-spi2-core)
/usr/bin/python3 -c "import pyatspi" 2>/dev/null || need+=(python3-pyatspi)
[ -d /usr/share/fonts/truetype/dejavu ] || need+=(fonts-dejavu-core)
# GNOME's settings as OSWorld's tasks read and write them (gsettings), and the compiler of the settings
# the desktops start with (sandbox_workers/providers/xdesktop/machine.py).
[ -e /usr/share/glib-2.0/schemas/org.gnome.desktop.screensaver.gschema.xml ] || need+=(gsettings-desktop-schemas)
have_cmd gsettings || need+=(libglib2.0-bin)
[ -e /usr/libexec/dconf-service ] || need+=(dconf-service dconf-gsettings-backend)
have_cmd dconf || need+=(dconf-cli)
if [ "$MODE" = test ]; then
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  have_cmd docker-compose || need+=(docker-compose)
  have_cmd turnserver || need+=(coturn)  # the live view's WebRTC relayed through a real TURN server
fi
if [ ${#need[@]} -gt 0 ]; then
  log "installing Debian packages: ${need[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# --- Python ------------------------------------------------------------------------------------
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  $PY -m venv .venv
fi
# train: torch (the CPU wheel pinned in pyproject) and transformers, for local policies and training;
# dev (the test tools, `datasets` for loading exports back) only for the tests.
extras=train
[ "$MODE" = test ] && extras=dev,train
pip_stamp=$(stamp_of pyproject.toml)
installed=$(cat var/.pip-stamp 2>/dev/null || true)
# A tree set up for the tests has what `make run` needs too.
if [ "$installed" != "$pip_stamp $extras" ] && [ "$installed" != "$pip_stamp dev,train" ]; then
  log "pip install -e .[$extras]"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[$extras]"
  echo "$pip_stamp $extras" > var/.pip-stamp
fi

# Sandboxes run as users of their own and bind the environment's packages, the MiniWoB pages, the games
# and the MCP servers read-only from here: make them readable by others whatever umask the checkout and
# .venv were made with (never the var dir or keys). What cannot be fixed stops the set-up, naming it.
if ! .venv/bin/python -m sandbox_workers.providers.host_files; then
  echo "[setup] sandboxes cannot read the project's files (above): fix that, or keep the checkout where" \
    "other users may pass (e.g. /srv or /opt rather than a private home)" >&2
  exit 1
fi

# --- Front-end packages from npm ------------------------------------------------------------------
npm_stamp=$(stamp_of package.json package-lock.json)
if [ "$(cat var/.npm-stamp 2>/dev/null)" != "$npm_stamp" ] || [ ! -d node_modules ]; then
  log "npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$npm_stamp" > var/.npm-stamp
fi
mkdir -p static/vendor
cp -u node_modules/htmx.org/dist/htmx.min.js static/vendor/htmx.min.js
# noVNC is ES modules (core/ imports ../vendor/pako): copied as they are, no build step.
mkdir -p static/vendor/novnc
cp -ru node_modules/@novnc/novnc/core node_modules/@novnc/novnc/vendor static/vendor/novnc/
# Chart.js (UMD build) draws the dashboards' charts from their JSON endpoints.
cp -u node_modules/chart.js/dist/chart.umd.min.js static/vendor/chart.umd.min.js
# With its source map: collectstatic (whitenoise) follows the sourceMappingURL and fails without it.
cp -u node_modules/chart.js/dist/chart.umd.min.js.map static/vendor/chart.umd.min.js.map

log "ready ($MODE)"
