"""A task's downloads come from public hosts only: the importers refuse a URL on loopback or a private
network where the URL says so itself, naming the task and the field (the host checks again at fetch
time: tests/sandbox_workers/test_fetch_cache.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from agent_core.tasks.osworld import OSWorldImportError, import_osworld_task
from agent_core.tasks.public_urls import address_refusal, allowed_networks, literal_refusal
from agent_core.tasks.spec import TaskSpecError, parse_task
from tests.agent_core.test_osworld_import import CALC_TASK


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),  # noqa: S104 (an address to refuse, not one to bind)
        ("224.0.0.251", "multicast"),
        ("100.64.0.1", "non-public"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fd12:3456::1", "private"),
        ("ff02::1", "multicast"),
        ("fec0::1", "site-local"),
        ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, a loopback"),
        ("::ffff:10.1.1.1", "IPv4-mapped form of 10.1.1.1, a private"),
        ("64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254, a link-local"),
        ("2002:7f00:1::", "6to4 form of 127.0.0.1, a loopback"),
    ],
)
def test_non_public_addresses_are_refused_with_their_kind(address: str, kind: str) -> None:
    why = address_refusal(address)
    assert why is not None and kind in why and why.startswith(address), why


@pytest.mark.parametrize("address", ["8.8.8.8", "151.101.1.69", "2606:4700::6810:84e5", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert address_refusal(address) is None


def test_the_operators_networks_let_a_labs_own_server_through() -> None:
    lab = allowed_networks("10.1.2.0/24, fd00:1::/64")
    assert address_refusal("10.1.2.3", lab) is None
    assert address_refusal("::ffff:10.1.2.3", lab) is None
    assert address_refusal("fd00:1::7", lab) is None
    assert address_refusal("10.1.3.1", lab) == "10.1.3.1 is a private address"
    with pytest.raises(ValueError, match="SANDBOX_FETCH_ALLOW_NETS: 'files' is not a network"):
        allowed_networks("10.0.0.0/8,files")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/admin/",
        "http://127.1/x",  # the resolver reads these as 127.0.0.1 too
        "http://2130706433/x",
        "http://0x7f.0.0.1/x",
        "http://[::1]/x",
        "http://[::ffff:127.0.0.1]/x",
        "http://localhost/x",
        "http://files.localhost/x",
        "http://nas.local/x",
        "https://fileserver.internal/x",
        "http://192.168.0.10/x",
        "http://user:pw@example.org/x",
        "file:///etc/passwd",
    ],
)
def test_literal_loopback_private_or_local_urls_are_refused(url: str) -> None:
    assert literal_refusal(url, ()) is not None


@pytest.mark.parametrize(
    "url", ["https://huggingface.co/datasets/x/resolve/main/a.xlsx", "https://osworld-samples.invalid/f/a"]
)
def test_public_urls_and_mirror_only_keys_pass(url: str) -> None:
    assert literal_refusal(url, ()) is None


def test_the_osworld_importer_names_the_download_field_of_a_loopback_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SANDBOX_FETCH_ALLOW_NETS", raising=False)
    doc = copy.deepcopy(CALC_TASK)
    doc["config"][0]["parameters"]["files"][1]["url"] = "http://127.0.0.1:8000/admin/"
    with pytest.raises(OSWorldImportError) as err:
        import_osworld_task(doc)
    message = str(err.value)
    assert (
        message.startswith(f"OSWorld task {doc['id']}: config[0]")
        and "files[1]: url 'http://127.0.0.1:8000/admin/'" in message
    )
    assert "127.0.0.1 is a loopback address" in message

    # The reference file a checker downloads (OSWorld's cloud_file) is a download too.
    doc = copy.deepcopy(CALC_TASK)
    doc["evaluator"]["expected"]["path"] = "http://169.254.169.254/latest/meta-data/"
    with pytest.raises(OSWorldImportError, match=r"expected.*path 'http://169\.254\.169\.254/.*link-local"):
        import_osworld_task(doc)

    # An operator who named the lab's network lets its file server in.
    monkeypatch.setenv("SANDBOX_FETCH_ALLOW_NETS", "127.0.0.1/32")
    doc = copy.deepcopy(CALC_TASK)
    doc["config"][0]["parameters"]["files"][1]["url"] = "http://127.0.0.1:8000/files/notes.txt"
    urls = [step.args.get("url") for step in import_osworld_task(doc).setup]
    assert "http://127.0.0.1:8000/files/notes.txt" in urls


def test_an_uploaded_osworld_file_with_a_private_url_is_refused_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent_core.tasks import osworld_files

    monkeypatch.delenv("SANDBOX_FETCH_ALLOW_NETS", raising=False)
    doc = copy.deepcopy(CALC_TASK)
    doc["config"][0]["parameters"]["files"][0]["url"] = "http://[::1]:6379/"
    path = tmp_path / "libreoffice_calc" / "totals.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    imported, refused = osworld_files.import_osworld_files([path])
    assert imported == []
    assert [p for p, _ in refused] == [str(path)]
    assert "files[0]: url 'http://[::1]:6379/' is refused: ::1 is a loopback address" in refused[0][1]


def native(step: dict[str, Any], probe: dict[str, Any] | None = None) -> dict[str, Any]:
    check = {"probe": probe or {"op": "file", "path": "a.txt"}, "metric": "exact_match", "expected": "x"}
    return {
        "format": "flywheel-task/1",
        "id": "t/fetching",
        "title": "fetching",
        "instruction": "Do it.",
        "platform": "desktop",
        "setup": [step],
        "checker": {"checks": [check]},
    }


def test_native_task_files_refuse_a_private_fetch_in_setup_and_in_a_checkers_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SANDBOX_FETCH_ALLOW_NETS", raising=False)
    ok = {"op": "fetch", "url": "https://example.org/a.txt", "path": "a.txt"}
    parse_task(native(ok))
    with pytest.raises(TaskSpecError, match=r"setup\[0\] \(fetch\): url 'http://10\.0\.0\.8/a' is refused"):
        parse_task(native({**ok, "url": "http://10.0.0.8/a"}))
    probe = {"op": "fetch", "url": "http://localhost:8000/gold.txt"}
    with pytest.raises(TaskSpecError, match=r"checker\.checks\[0\]\.probe \(fetch\): url 'http://localhost"):
        parse_task(native(ok, probe))
