"""The Chrome sample: a page (fetched into ~/Desktop) open in the browser; the task bookmarks it on the
bookmarks bar. Scored as OSWorld's chrome tasks are: the evaluator's postconfig quits the browser (it
writes its profile) and starts it again, OSWorld's own `bookmarks` getter reads the profile's Bookmarks
file, and is_expected_bookmarks compares the bar's URLs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agent_core.actions import model as A
from agent_core.suites.desktop_gui import browser_page, focus, read, wait_until
from agent_core.suites.osworld_samples import BASE, FILES, TASKS, step, task_id
from agent_core.tasks.oracles import OracleContext, register_oracle, said

PAGE = "/home/user/Desktop/soup.html"
URL = f"file://{PAGE}"
TITLE = "Lentil soup"
FILES[f"{BASE}/chrome/soup.html"] = lambda: (
    f"<!doctype html><html><head><meta charset='utf-8'><title>{TITLE}</title></head><body>"
    f"<h1>{TITLE}</h1><ol><li>Soften an onion in oil.</li><li>Add 200 g red lentils and 1 l stock.</li>"
    "<li>Simmer 20 minutes; season with cumin and lemon.</li></ol></body></html>"
).encode()

TASKS["chrome"] = {
    "id": "sample-chrome-bookmark-page",
    "snapshot": "chrome",
    "instruction": "Bookmark the recipe page open in the browser on the bookmarks bar, so I find it again.",
    "source": "the platform's own sample (OSWorld's format)",
    "config": [
        step("download", files=[{"url": f"{BASE}/chrome/soup.html", "path": PAGE}]),
        step("launch", command=["google-chrome", "--remote-debugging-port=1337"]),
        step("launch", command=["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]),
        step("chrome_open_tabs", urls_to_open=[URL]),
    ],
    "trajectory": "trajectories/",
    "related_apps": ["chrome"],
    "evaluator": {
        "postconfig": [
            step("launch", command=["pkill", "chrome"]),
            step("launch", command=["google-chrome", "--remote-debugging-port=1337"]),
        ],
        "func": "is_expected_bookmarks",
        "result": {"type": "bookmarks"},
        "expected": {"type": "rule", "rules": {"type": "bookmark_bar_websites_urls", "urls": [URL]}},
    },
}


@register_oracle(task_id("chrome", TASKS["chrome"]))
def bookmark_page(ctx: OracleContext) -> Iterator[A.Action]:
    """Ctrl+D on the page bookmarks it (Chromium saves it at once, in Other bookmarks), and the bubble it
    opens moves it to the bookmarks bar."""
    win = browser_page(ctx, TITLE)
    yield from focus(ctx, win, f"The browser shows the page {TITLE!r}, the one to bookmark.")
    yield said(
        ctx,
        f"The {TITLE} page is the active tab; Ctrl+D bookmarks it and opens a bubble naming the folder.",
        A.Hotkey(keys=("ctrl", "d")),
    )
    yield said(ctx, "The bubble opened with the name field selected; I wait a moment for it to settle.",
               A.Wait(seconds=1.0))  # fmt: skip
    yield said(
        ctx,
        "The bubble says Bookmark added, in the folder Other bookmarks, not the bar: I press Tab to move "
        "from the name to the folder list.",
        A.Press(key="tab"),
    )
    yield said(ctx, "The folder list has the focus; Up picks the entry above Other bookmarks, Bookmarks bar.",
               A.Press(key="up"))  # fmt: skip
    yield said(
        ctx,
        "The folder now reads Bookmarks bar. Enter in the folder list would not close the bubble, so I go "
        "back to the name field with Shift+Tab.",
        A.Hotkey(keys=("shift", "tab")),
    )
    yield said(ctx, "The name field has the focus; Enter there is Done, which keeps the new folder.",
               A.Press(key="enter"))  # fmt: skip
    # Chromium writes its Bookmarks file a moment after the change.
    wait_until(
        lambda: URL in json.dumps(_bar(read(ctx, ".config/chromium/Default/Bookmarks"))),
        "Chromium to save the bookmark on its bar",
    )
    yield said(ctx, "The page is bookmarked on the bookmarks bar.", A.Finished(content=""))


def _bar(text: str | None) -> Any:
    """The bookmarks bar's entries in a Bookmarks file's text (none while it is missing or half written)."""
    try:
        return json.loads(text or "{}").get("roots", {}).get("bookmark_bar", {}).get("children", [])
    except ValueError:
        return []
