"""The OS sample: files fetched into ~/Documents, a terminal open; the task is done with shell commands
typed into it. Scored as OSWorld's os tasks are: `ls` and `cat` in the desktop, check_include_exclude and
exact_match (`and` of the two)."""

from __future__ import annotations

import functools
from collections.abc import Iterator

from agent_core.actions import model as A
from agent_core.suites.desktop_gui import shell, shell_ok, wait_until
from agent_core.suites.osworld_samples import BASE, FILES, TASKS, step, task_id
from agent_core.tasks.oracles import OracleContext, register_oracle, said

DOCUMENTS = {"minutes.txt": b"Met at 10; agreed the budget.\n", "todo.txt": b"call the printer shop\n",
             "logo.md": b"# logo ideas\n"}  # fmt: skip
for _name, _body in DOCUMENTS.items():
    FILES[f"{BASE}/os/{_name}"] = functools.partial(bytes, _body)

TASKS["os"] = {
    "id": "sample-os-backup-txt",
    "snapshot": "os",
    "instruction": "Copy every .txt file of ~/Documents into a new folder ~/backup (leave the other files).",
    "source": "the platform's own sample (OSWorld's format)",
    "config": [
        step(
            "download",
            files=[
                {"url": f"{BASE}/os/{name}", "path": f"/home/user/Documents/{name}"} for name in DOCUMENTS
            ],
        ),
        step("launch", command=["gnome-terminal"]),
        step("sleep", seconds=0.5),
    ],
    "trajectory": "trajectories/",
    "related_apps": ["os"],
    "evaluator": {
        "func": ["check_include_exclude", "exact_match"],
        "result": [
            {"type": "vm_command_line", "command": "ls /home/user/backup", "shell": True},
            {"type": "vm_command_line", "command": ["cat", "/home/user/backup/todo.txt"]},
        ],
        "expected": [
            {
                "type": "rule",
                "rules": {"include": ["minutes.txt", "todo.txt"], "exclude": ["logo.md", "No such file"]},
            },
            {"type": "rule", "rules": {"expected": DOCUMENTS["todo.txt"].decode()}},
        ],
    },
}


@register_oracle(task_id("os", TASKS["os"]))
def backup_txt(ctx: OracleContext) -> Iterator[A.Action]:
    """Make the folder and copy the .txt files with one command line in the open terminal."""
    yield from shell(
        ctx,
        "mkdir -p ~/backup && cp ~/Documents/*.txt ~/backup/",
        "~/backup does not exist yet: I make it and copy only the .txt files of ~/Documents into it, "
        "which leaves logo.md where it is.",
    )
    wait_until(lambda: shell_ok(ctx, "test -s ~/backup/todo.txt"), "the copies in ~/backup")
    yield said(ctx, "minutes.txt and todo.txt are in ~/backup.", A.Finished(content=""))
