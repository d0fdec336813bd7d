"""Long lists a page at a time, their filters in the URL (the Tasks and Episodes pages).

A list page keeps what it shows in its query string, so a reload or a shared link shows the same:
`query_of` is the part of it that is set (a filter form sends its empty fields too), which the page's
links carry (`{% querystring query page=n %}`) and an htmx answer pushes to the address bar.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse, QueryDict

from webapp.common.params import int_param


def query_of(params: QueryDict, keys: Iterable[str]) -> QueryDict:
    """The values of `keys` that are set in `params` (blank ones left out), and the page."""
    query = QueryDict(mutable=True)
    for key in (*keys, "page"):
        if value := params.get(key, "").strip():
            query[key] = value
    return query


def page_of(items: Sequence[Any], params: QueryDict, *, per_page: int) -> Page:
    """The page of `items` that `params` asks for: past the end, the last one; anything but a whole
    number, a 400 naming `page`."""
    return Paginator(items, per_page).get_page(int_param(params.get("page"), name="page", minimum=1))


def push_query(response: HttpResponse, request: HttpRequest, query: QueryDict) -> HttpResponse:
    """Have htmx put this list's address, with only the filters that are set, in the address bar."""
    response["HX-Push-Url"] = request.path + (f"?{query.urlencode()}" if query else "")
    return response
