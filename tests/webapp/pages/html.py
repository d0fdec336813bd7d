"""Small readers of rendered pages, shared by the page tests."""

from __future__ import annotations

import re

from django.http import HttpResponse


def text(response: HttpResponse) -> str:
    return response.content.decode()


def count_testid(response: HttpResponse, testid: str) -> int:
    """How many elements carry data-testid=`testid`."""
    return len(re.findall(rf'data-testid="{re.escape(testid)}"', text(response)))


def episode_ids_listed(response: HttpResponse) -> set[int]:
    """The episode ids the episode list (page or fragment) links to."""
    return {
        int(pk)
        for pk in re.findall(
            r'<tr data-testid="episode-row">\s*<td><a href="/episodes/(\d+)/"', text(response)
        )
    }


def nav_links(response: HttpResponse) -> list[tuple[str, str]]:
    """(label, href) of each link in the main navigation, in order; [] when there is no navigation."""
    nav = re.search(r'<nav aria-label="Main">(.*?)</nav>', text(response), re.S)
    if nav is None:
        return []
    return [
        (label.strip(), href) for href, label in re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', nav[1])
    ]
