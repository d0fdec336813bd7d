"""The Thunderbird sample: a profile tarball (made here, as OSWorld's thunderbird-profile.tar.gz is
downloaded) extracted into the home folder and Thunderbird launched on it, showing only Local Folders.
The task (OSWorld's 2ad9387a): create two local folders. Scored as OSWorld scores it: `ls -R` of the
profile's Local Folders into a cache file, check_list with regexes for each folder and its .msf."""

from __future__ import annotations

import gzip
import io
import tarfile
import time
from collections.abc import Iterator

from agent_core.actions import model as A
from agent_core.suites.desktop_gui import OracleFailed, focus, wait_no_window, wait_window
from agent_core.suites.osworld_samples import BASE, FILES, TASKS, step, task_id
from agent_core.tasks.oracles import OracleContext, register_oracle, said

PROFILE_DIR = "t5q2a5hp.default-release"  # the name OSWorld's profile has
PROFILE = f"/home/user/.thunderbird/{PROFILE_DIR}"
LOCAL_FOLDERS = f"{PROFILE}/Mail/Local Folders"
INSTALL = "FDC34C9F024745EB"
"""The hash Thunderbird gives its install folder /usr/lib/thunderbird (Debian's): the profile that
installs.ini names under it is the one this Thunderbird opens, with no profile of its own made."""
FOLDERS = ("COMPANY", "UNIVERSITY")

PROFILES_INI = f"""[Profile0]
Name=default-release
IsRelative=1
Path={PROFILE_DIR}
Default=1

[General]
StartWithLastProfile=1
Version=2

[Install{INSTALL}]
Default={PROFILE_DIR}
Locked=1
"""
INSTALLS_INI = f"[{INSTALL}]\nDefault={PROFILE_DIR}\nLocked=1\n"
PREFS: dict[str, str | bool | int] = {
    # One account: Local Folders (no mail server, no identity), so no account setup shows.
    "mail.accountmanager.accounts": "account1",
    "mail.accountmanager.localfoldersserver": "server1",
    "mail.account.account1.server": "server1",
    "mail.server.server1.type": "none",
    "mail.server.server1.hostname": "Local Folders",
    "mail.server.server1.name": "Local Folders",
    "mail.server.server1.userName": "nobody",
    "mail.server.server1.directory": LOCAL_FOLDERS,
    "mail.server.server1.directory-rel": "[ProfD]Mail/Local Folders",
    "mail.provider.suppress_dialog_on_startup": True,
    # No first-run, what's-new, donation, default-client, rights or telemetry prompts, no start page.
    "mail.shell.checkDefaultClient": False,
    "mailnews.start_page.enabled": False,
    "mailnews.start_page_override.mstone": "ignore",
    "mail.rights.override": True,
    "mail.inappnotifications.enabled": False,
    "app.donation.eoy.version.viewed": 999,
    "app.update.enabled": False,
    "app.update.auto": False,
    "datareporting.policy.dataSubmissionEnabled": False,
    "datareporting.policy.dataSubmissionPolicyBypassNotification": True,
    "datareporting.healthreport.uploadEnabled": False,
    "toolkit.telemetry.enabled": False,
    "toolkit.telemetry.reportingpolicy.firstRun": False,
    "mail.biff.play_sound": False,
    "calendar.integration.notify": False,
}


def _pref(name: str, value: str | bool | int) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else value
    shown = f'"{text}"' if isinstance(value, str) else text
    return f'user_pref("{name}", {shown});\n'


def profile_tarball() -> bytes:
    """~/.thunderbird with the profile, as a .tar.gz to extract in /home/user (deterministic bytes)."""
    prefs = "// Mozilla User Preferences\n\n" + "".join(_pref(k, v) for k, v in PREFS.items())
    entries: list[tuple[str, bytes | None]] = [
        (".thunderbird", None),
        (".thunderbird/profiles.ini", PROFILES_INI.encode()),
        (".thunderbird/installs.ini", INSTALLS_INI.encode()),
        (f".thunderbird/{PROFILE_DIR}", None),
        (f".thunderbird/{PROFILE_DIR}/prefs.js", prefs.encode()),
        (f".thunderbird/{PROFILE_DIR}/Mail", None),
        (f".thunderbird/{PROFILE_DIR}/Mail/Local Folders", None),
    ]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, body in entries:
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 1704067200, 1000, 1000, "user", "user"
            if body is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(body), 0o644
                tar.addfile(info, io.BytesIO(body))
    return gzip.compress(raw.getvalue(), mtime=0)


TARBALL = f"{BASE}/thunderbird/thunderbird-profile.tar.gz"
FILES[TARBALL] = profile_tarball
DOWNLOADED = "/home/user/thunderbird-profile.tar.gz"

TASKS["thunderbird"] = {
    "id": "sample-thunderbird-local-folders",
    "snapshot": "thunderbird",
    "instruction": f"Create two local folders in Thunderbird for me: {FOLDERS[0]} and {FOLDERS[1]}.",
    "source": "the platform's own sample (OSWorld's format)",
    "config": [
        step("download", files=[{"url": TARBALL, "path": DOWNLOADED}]),
        step("execute", command=["tar", "-xzv", "--recursive-unlink", "-f", DOWNLOADED, "-C", "/home/user/"]),
        step("launch", command=["/usr/bin/thunderbird"]),
        step("sleep", seconds=3),
    ],
    "trajectory": "trajectories/",
    "related_apps": ["thunderbird"],
    "evaluator": {
        "postconfig": [
            # Thunderbird writes a new folder's mailbox and its .msf summary as it creates it.
            step("sleep", seconds=1),
            step("execute", command=["ls", "-R", LOCAL_FOLDERS], stdout="thunder-local-folder.ls"),
        ],
        "func": "check_list",
        "result": {"type": "cache_file", "path": "thunder-local-folder.ls"},
        "expected": {
            "type": "rule",
            "rules": {
                "expect": [
                    rule for name in FOLDERS for rule in (rf"\b{name}\.msf\b", rf"\b{name}/?(?!\.msf)")
                ]
            },
        },
    },
}

MAIN_TITLE = "Local Folders - Mozilla Thunderbird"
"""The main window's title once it shows Local Folders, its one account (selected at start)."""
DIALOG = "New Folder"
TRIES = 3


@register_oracle(task_id("thunderbird", TASKS["thunderbird"]))
def thunderbird_local_folders(ctx: OracleContext) -> Iterator[A.Action]:
    """Each folder through File > New > Folder… (the menu bar's keys), typed into the New Folder dialog,
    which proposes the selected Local Folders as the parent. A menu or dialog that a loaded desktop
    did not show in time is closed with Escape and opened again."""
    main = wait_window(ctx, "thunderbird", MAIN_TITLE, timeout=120)
    yield from focus(ctx, main, "Thunderbird shows Local Folders, its only account.")
    for name in FOLDERS:
        for attempt in range(TRIES):
            yield from _new_folder_dialog(ctx, name, again=attempt > 0)
            try:
                wait_window(ctx, "thunderbird", DIALOG, timeout=30)
            except OracleFailed:
                if attempt == TRIES - 1:
                    raise
                yield said(
                    ctx,
                    "No New Folder dialog came up; Escape closes any menu left open.",
                    A.Press(key="escape"),
                )
                yield said(ctx, "Escape once more, so that no submenu stays open.", A.Press(key="escape"))
                continue
            time.sleep(1)  # the dialog has just opened: it finishes drawing (not a step: OSWorld allows 15)
            yield said(
                ctx,
                f'The New Folder dialog is open with its Name field focused and "Create as a subfolder of" '
                f"set to Local Folders; I type {name}.",
                A.Type(content=name),
            )
            yield said(
                ctx,
                f"The name reads {name} and the parent is Local Folders: Enter presses Create Folder.",
                A.Press(key="enter"),
            )
            try:
                wait_no_window(ctx, "thunderbird", DIALOG, timeout=30)
                break
            except OracleFailed:
                if attempt == TRIES - 1:
                    raise
                yield said(
                    ctx,
                    "The New Folder dialog is still open (the name did not reach it); Escape cancels it so "
                    "that I start over.",
                    A.Press(key="escape"),
                )
                wait_no_window(ctx, "thunderbird", DIALOG, timeout=30)
        wait_window(ctx, "thunderbird", MAIN_TITLE)
    yield said(
        ctx,
        f"The folder pane lists {FOLDERS[0]} and {FOLDERS[1]} under Local Folders.",
        A.Finished(content=""),
    )


def _new_folder_dialog(ctx: OracleContext, name: str, again: bool) -> Iterator[A.Action]:
    """File > New > Folder… with the keyboard, a moment between the menus for them to open."""
    yield said(
        ctx,
        f"Thunderbird's main window shows Local Folders, selected in the folder pane. To make the local "
        f"folder {name} I open the File menu with Alt+F{' again' if again else ''} (the menu bar stays "
        "hidden until Alt is used).",
        A.Hotkey(keys=("alt", "f")),
    )
    time.sleep(1)  # the menu opens (a moment of the oracle's own, not a step of the episode's 15)
    yield said(ctx, "The File menu is open; N opens its New submenu.", A.Press(key="n"))
    time.sleep(1)
    yield said(ctx, "The New submenu lists Folder… with F as its key; I press F.", A.Press(key="f"))
