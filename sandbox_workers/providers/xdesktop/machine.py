"""What a desktop has of the Ubuntu machine OSWorld's tasks assume, by name: `gnome-terminal` (and
its server's process name, for `killall gnome-terminal-server`), Ctrl+Alt+T opening a terminal, and the
GNOME settings its image has (`GSETTINGS`, in the user's dconf database, written at each start).

The host writes them into the sandbox's root (read-only to the sandbox) and the holder binds them, so
every process of the desktop sees them: its own /usr/local/bin (the host's /usr/local/bin is the
host's, not the sandbox's) and openbox's system configuration (/etc/xdg/openbox/rc.xml, the host's
with the keybinding added; a ~/.config/openbox/rc.xml of the sandbox's user still wins, as on any
machine). The terminal is xterm: GNOME Terminal needs a GNOME session, which these desktops do not run.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

XTERM = "/usr/bin/xterm"
OPENBOX_RC = Path("/etc/xdg/openbox/rc.xml")
LOCAL_BIN = "/usr/local/bin"
TERMINAL_TITLE = "Terminal"
"""The new terminal's window title: OSWorld's steps activate the window named "Terminal"."""
NEW_TERMINAL_KEY = "C-A-t"
# GNOME's client returns at once and its server shows the window: so this one starts the terminal in
# a session of its own and exits 0. It takes the options OSWorld's tasks give it; another is refused
# with exit 2, as gnome-terminal refuses an unknown one.
GNOME_TERMINAL = f"""#!/bin/sh
# gnome-terminal on this desktop: a terminal window ({XTERM}, under GNOME's server's name).
max=
while [ $# -gt 0 ]; do
  case "$1" in
    --maximize|--full-screen) max=-maximized ;;
    --working-directory=*) cd "${{1#*=}}" || exit 1 ;;
    --working-directory) shift; cd "$1" || exit 1 ;;
    --wait|--window|--tab|-q|--quiet) ;;
    --) shift; break ;;
    -e|-x|--command=*) echo "gnome-terminal: $1 is deprecated here; use -- COMMAND" >&2; exit 2 ;;
    *) echo "gnome-terminal: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [ $# -gt 0 ]; then
  set -- -e "$@"
fi
exec setsid -f {LOCAL_BIN}/gnome-terminal-server -T {TERMINAL_TITLE} $max "$@" </dev/null >/dev/null 2>&1
"""
KEYBIND = (
    f'  <keybind key="{NEW_TERMINAL_KEY}">\n'
    f'    <action name="Execute"><command>{LOCAL_BIN}/gnome-terminal</command></action>\n'
    "  </keybind>\n"
)


def write_machine_files(root: Path) -> list[tuple[str, str, bool]]:
    """Write the desktop's programs and configuration under `root` (the sandbox's host folder); the
    read-only binds that put them in place inside the sandbox."""
    bin_dir = root / "local-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    bin_dir.chmod(0o755)
    script = bin_dir / "gnome-terminal"
    script.write_text(GNOME_TERMINAL)
    script.chmod(0o755)
    server = bin_dir / "gnome-terminal-server"
    if not server.is_symlink():
        server.symlink_to(XTERM)  # its process name is the link's: killall finds it by that name
    binds = [(str(bin_dir), LOCAL_BIN, False)]
    if OPENBOX_RC.is_file():
        rc = root / "openbox-rc.xml"
        text = OPENBOX_RC.read_text()
        if "<keyboard>" in text:
            text = text.replace("<keyboard>", "<keyboard>\n" + KEYBIND, 1)
        rc.write_text(text)
        os.chmod(rc, 0o644)
        binds.append((str(rc), str(OPENBOX_RC), False))
    return binds


VLCRC = ".config/vlc/vlcrc"
VLC_HTTP_PORT = 8080
VLC_HTTP_PASSWORD = "password"  # noqa: S105 - OSWorld's VM's, which its getter sends; inside the sandbox only
# VLC's settings on OSWorld's machine: its first-run privacy question answered (metadata from the network
# off), and the HTTP interface on (port 8080, OSWorld's getter's password) that vlc_playing_info reads.
VLC_SETTINGS = {
    "qt-privacy-ask": "0",
    "metadata-network-access": "0",
    "extraintf": "http",
    "http-password": VLC_HTTP_PASSWORD,
}


def vlc_config(default: str) -> str:
    """The vlcrc VLC writes with its defaults (`vlc --reset-config`), with VLC_SETTINGS set as VLC
    itself sets a changed option: the commented `#name=default` line becomes `name=value`."""
    lines = default.splitlines()
    missing = dict(VLC_SETTINGS)
    for i, line in enumerate(lines):
        name = line.lstrip("#").split("=", 1)[0]
        if "=" in line and name in missing:
            lines[i] = f"{name}={missing.pop(name)}"
    if missing:
        raise ValueError(f"VLC's default configuration has no option {', '.join(missing)}")
    return "\n".join(lines) + "\n"


DCONF_USER_DB = ".config/dconf/user"
# GNOME settings OSWorld's image has that differ from the schemas' defaults, found by its tasks: a task
# that asks to lock the screen automatically is scored by `lock-enabled` being true, so the image has it
# false (our desktops, at the schema's default true, scored that task 1 with nobody acting). Only what a
# task shows; the rest is at the schemas' defaults.
GSETTINGS = {"org/gnome/desktop/screensaver": {"lock-enabled": "false"}}


def dconf_user_db(cache: Path) -> bytes | None:
    """The dconf user database (~/.config/dconf/user) holding GSETTINGS, compiled once into `cache`
    with `dconf compile`; None (and a warning) where dconf-cli is not installed."""
    out = cache / "dconf-user"
    if out.is_file():
        return out.read_bytes()
    dconf = shutil.which("dconf")
    if dconf is None:
        log.warning("dconf-cli is not installed: desktops start with GNOME's schema defaults")
        return None
    with tempfile.TemporaryDirectory() as keyfiles:
        text = "".join(
            f"[{path}]\n" + "".join(f"{key}={value}\n" for key, value in keys.items()) + "\n"
            for path, keys in GSETTINGS.items()
        )
        Path(keyfiles, "osworld").write_text(text)
        cache.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([dconf, "compile", str(out), keyfiles], capture_output=True, text=True)  # noqa: S603
    if done.returncode != 0:
        raise RuntimeError(f"dconf compile failed: {done.stderr.strip()}")
    return out.read_bytes()
