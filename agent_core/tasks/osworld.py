"""Import OSWorld tasks (`evaluation_examples/examples/<domain>/<id>.json`) as `flywheel-task/1` specs.

Every part of a task is mapped or the task is refused with an `OSWorldImportError` naming the task,
the item and what is missing; nothing is dropped silently (an unknown key is a refusal). The task runs
on the `office` desktop profile (OSWorld's applications, a 1920×1080 screen, $HOME /home/user as in
OSWorld's VM) and is scored by OSWorld's own metric functions (`osworld` metric: desktop-env's
functions in a process and environment of their own, `agent_core.tasks.osworld_metrics`) with
OSWorld's combination rule (`and`: 0 when any metric is 0, else the mean: `all_mean`; `or`: the
maximum: `any`). The document as given is kept under `origin.osworld`.

Setup steps (`config[i].type`, and `evaluator.postconfig`, which becomes `checker.before`):
    download           → fetch (by the sandbox host, into its content-addressed cache, mirror first)
    execute, command   → exec (argv lists are shell-quoted; `python` runs python3; `~` expanded by the
                         shell as OSWorld's server does); a `python -c` pyautogui script → pyautogui
                         (read with ast, run through the sandbox's own input path). Refused: sudo,
                         OSWorld's {PLACEHOLDER}s, `until`, `stdout`/`stderr` (OSWorld's host cache).
    launch             → launch, by `LAUNCH_APPS` (per-app flags; `socat`, OSWorld's DevTools port
                         forward, is skipped); `code` (VS Code) is refused: not packaged for Debian
    open               → launch of the app for the file's extension (`OPEN_APPS`; no extension: a
                         folder, pcmanfm)
    chrome_open_tabs   → launch chromium with the URLs (new tabs of the running browser)
    activate_window,
    close_window       → window {action, name, strict, by_class}
    sleep              → wait
    refused            → googledrive, login (online accounts), and the rest of `SETUP_REFUSED`
Getters (`evaluator.result` / `evaluator.expected`):
    vm_file            → file probe, raw (a file for the metric, named as `dest`); `multi` → files
                         probe with `gives`. `time_suffix` only changes the name OSWorld gives its
                         local copy, which no metric reads.
    cloud_file         → fetch probe (the sandbox host's cache and mirror); `multi` refused
    vm_command_line    → exec probe with any_exit (OSWorld reads stdout whatever the exit code)
    vm_command_error   → exec probe of the command's stderr
    gimp_config_file   → file probe of ~/.config/GIMP/2.10/<file_name>
    rule               → expected: the rule's `rules`, as OSWorld's get_rule gives them
    refused            → `GETTER_REFUSED` (Chrome's DevTools state, the accessibility tree in
                         OSWorld's XML, relative-time rules, …), each with its reason
Metrics: any function of desktop-env's metrics (`OSWORLD_METRICS`), with its options as given.
    `func: infeasible` → `infeasible: true` (no checker).
A task needs the network when a command or a launched URL reaches a web host (downloads do not: the
host fetches them): it is tagged `needs:network`. A Windows task (Windows paths, Windows apps) is
refused.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from agent_core.tasks.spec import FORMAT, TaskSpec, TaskSpecError, parse_task

HOME = "/home/user"
HOME_DIRS = ("Desktop", "Documents", "Downloads", "Music", "Pictures", "Public", "Templates", "Videos")
PROFILE = "office"
SCREEN = [1920, 1080]
# OSWorld's example folders: a file's parent folder with one of these names becomes part of the id.
DOMAINS = (
    "chrome",
    "gimp",
    "libreoffice_calc",
    "libreoffice_impress",
    "libreoffice_writer",
    "multi_apps",
    "os",
    "thunderbird",
    "vlc",
    "vs_code",
)
TASK_KEYS = {
    "id", "snapshot", "instruction", "source", "config", "trajectory", "related_apps", "evaluator",
    "proxy", "fixed_ip", "possibility_of_env_change",
}  # fmt: skip
EVALUATOR_KEYS = {"func", "result", "expected", "options", "conj", "postconfig"}
WINDOWS_APPS = {"excel", "word", "powerpoint", "windows", "edge", "outlook", "notepad", "file_explorer"}
# The program OSWorld launches → (our app, for another program the flags it may take: prefixes).
LAUNCH_APPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gnome-terminal": ("xterm", ()),
    "xterm": ("xterm", ()),
    "gedit": ("mousepad", ()),
    "mousepad": ("mousepad", ()),
    "nautilus": ("pcmanfm", ()),
    "pcmanfm": ("pcmanfm", ()),
    "google-chrome": ("chromium", ()),
    "google-chrome-stable": ("chromium", ()),
    "chromium": ("chromium", ()),
    "chromium-browser": ("chromium", ()),
    "libreoffice": ("libreoffice", ()),
    "soffice": ("libreoffice", ("-",)),  # the same program under its other name
    "gimp": ("gimp", ()),
    "vlc": ("vlc", ()),
    "thunderbird": ("thunderbird", ()),
}
# Flags (prefixes) dropped from any launch: they only serve OSWorld's own machinery.
DROPPED_FLAGS = ("--remote-debugging-port=",)
SKIPPED_LAUNCHES = ("socat",)
UNAVAILABLE_PROGRAMS = {"code": "VS Code is not packaged for Debian, so our desktops do not have it"}
# `open` of a file: its extension → our app (what Ubuntu's xdg-open picks in OSWorld's image).
OPEN_APPS = {
    **dict.fromkeys(
        (".txt", ".md", ".py", ".sh", ".c", ".h", ".cpp", ".js", ".ts", ".css", ".json", ".tsv", ".log"),
        "mousepad",
    ),
    **dict.fromkeys((".yaml", ".yml", ".xml", ".ini", ".conf", ".cfg", ".toml", ".tex"), "mousepad"),
    **dict.fromkeys((".html", ".htm", ".pdf", ".svg"), "chromium"),
    **dict.fromkeys((".xlsx", ".xls", ".ods", ".csv", ".docx", ".doc", ".odt", ".rtf"), "libreoffice"),
    **dict.fromkeys((".pptx", ".ppt", ".odp"), "libreoffice"),
    **dict.fromkeys((".png", ".jpg", ".jpeg", ".xcf", ".bmp", ".gif", ".tif", ".tiff", ".webp"), "gimp"),
    **dict.fromkeys((".mp4", ".mp3", ".mkv", ".avi", ".webm", ".wav", ".ogg", ".flac"), "vlc"),
}
# OSWorld's window names that differ on our desktops.
WINDOW_NAMES = {"Google Chrome": "Chromium", "Visual Studio Code": "VS Code"}
SETUP_REFUSED = {
    "googledrive": "needs a Google Drive account and the network",
    "login": "logs in to an online account over the network",
    "chrome_close_tabs": "closes tabs through Chrome DevTools, which our sandboxes do not expose yet",
    "upload_file": "uploads a file from OSWorld's host",
    "update_browse_history": "writes Chrome's history database, which our sandboxes do not do yet",
    "execute_with_verification": "verifies through OSWorld's VM server",
    "proxy": "configures OSWorld's network proxy",
}
_CHROME_STATE = "reads Chrome's state through DevTools, which our sandboxes do not expose yet"
GETTER_REFUSED = {
    "vm_terminal_output": "reads GNOME Terminal's text through accessibility, which xterm does not expose",
    "accessibility_tree": "OSWorld's metrics read its XML accessibility tree; ours is text",
    "googledrive_file": "needs a Google Drive account and the network",
    "rule_relativeTime": "relative-time rules (OSWorld computes them at scoring time) are not mapped yet",
    "info_from_website": "reads a live web site",
    "cache_file": "reads OSWorld's host cache, which the setup's execute.stdout fills: not mapped yet",
    "content_from_vm_file": "not mapped yet",
    "list_directory": "not mapped yet",
    "vscode_config": "VS Code is not packaged for Debian, so our desktops do not have it",
    **dict.fromkeys(
        (
            "active_tab_info", "active_tab_html_parse", "active_tab_url_parse", "active_url_from_accessTree",
            "open_tabs_info", "bookmarks", "history", "profile_name", "enabled_experiments",
            "find_unpacked_extension_path", "find_installed_extension_name", "cookie_data",
            "chrome_font_size", "chrome_language", "default_search_engine", "new_startup_page",
            "data_delete_automacally", "enable_do_not_track", "enable_enhanced_safety_browsing",
            "enable_safe_browsing", "page_info", "number_of_search_results", "url_dashPart",
            "url_path_parse", "macys_product_url_parse", "gotoRecreationPage_and_get_html_content",
            "shortcuts_on_desktop",
        ),
        _CHROME_STATE,
    ),
}  # fmt: skip
_PLACEHOLDER = re.compile(r"(?<!\$)\{[A-Z][A-Z0-9_]*\}")
_URL = re.compile(r"https?://", re.IGNORECASE)
_WEB_URL = re.compile(r"https?://(?!(localhost|127\.0\.0\.1)[:/])", re.IGNORECASE)
_SUDO = re.compile(r"(^|[\s;&|(`])sudo(\s|$)")
_WINDOWS_PATH = re.compile(r"^[a-zA-Z]:[\\/]|\\\\")

# The metric functions OSWorld's `desktop_env.evaluators.metrics` exports (desktop-env 1.0.2).
OSWORLD_METRICS = frozenset(
    {
        "check_accessibility_tree",
        "check_auto_saving_time",
        "check_brightness_decrease_and_structure_sim",
        "check_config_status",
        "check_contrast_increase_and_structure_sim",
        "check_csv",
        "check_direct_json_object",
        "check_enabled_experiments",
        "check_file_exists",
        "check_file_exists_and_structure_sim",
        "check_font_size",
        "check_global_key_play_pause",
        "check_gnome_favorite_apps",
        "check_green_background",
        "check_highlighted_words",
        "check_history_deleted",
        "check_html_background_image",
        "check_image_file_size",
        "check_image_mirror",
        "check_image_size",
        "check_image_stretch_and_center",
        "check_include_exclude",
        "check_italic_font_size_14",
        "check_json",
        "check_json_keybindings",
        "check_json_settings",
        "check_left_panel",
        "check_libre_locale",
        "check_line_number",
        "check_list",
        "check_moved_jpgs",
        "check_mp3_meta",
        "check_no_duplicates",
        "check_one_instance_when_started_from_file",
        "check_page_number_colors",
        "check_palette_and_structure_sim",
        "check_pdf_pages",
        "check_presenter_console_disable",
        "check_python_file_by_gold_file",
        "check_python_file_by_test_suite",
        "check_qt_bgcone",
        "check_qt_max_volume",
        "check_qt_minimal_view",
        "check_qt_slider_colours",
        "check_saturation_increase_and_structure_sim",
        "check_sharper",
        "check_slide_numbers_color",
        "check_slide_orientation_Portrait",
        "check_strikethrough",
        "check_structure_sim",
        "check_structure_sim_resized",
        "check_tabstops",
        "check_text_enlarged",
        "check_textbox_on_leftside",
        "check_thunderbird_filter",
        "check_thunderbird_folder",
        "check_thunderbird_prefs",
        "check_transition",
        "check_triangle_position",
        "compare_answer",
        "compare_archive",
        "compare_audios",
        "compare_conference_city_in_order",
        "compare_config",
        "compare_contains_image",
        "compare_csv",
        "compare_docx_files",
        "compare_docx_files_and_ignore_new_lines",
        "compare_docx_images",
        "compare_docx_lines",
        "compare_docx_tables",
        "compare_epub",
        "compare_font_names",
        "compare_highlighted_text",
        "compare_htmls",
        "compare_image_list",
        "compare_image_text",
        "compare_images",
        "compare_init_lines",
        "compare_insert_equation",
        "compare_line_spacing",
        "compare_pdf_images",
        "compare_pdfs",
        "compare_pptx_files",
        "compare_python_pure_text",
        "compare_references",
        "compare_result_files",
        "compare_subscript_contains",
        "compare_table",
        "compare_terminal_and_txt",
        "compare_text_file",
        "compare_time_in_speedtest_results",
        "compare_triangle_positions",
        "compare_unique_train_records",
        "compare_videos",
        "compare_zip_files",
        "contains_page_break",
        "decrease_brightness",
        "diff_text_file",
        "evaluate_alignment",
        "evaluate_colored_words_in_tables",
        "evaluate_conversion",
        "evaluate_presentation_fill_to_rgb_distance",
        "evaluate_spacing",
        "evaluate_strike_through_last_paragraph",
        "exact_match",
        "file_contains",
        "find_default_font",
        "fuzzy_match",
        "fuzzy_place_math",
        "get_unique_train_ids",
        "has_page_numbers_in_footers",
        "increase_saturation",
        "is_added_to_steam_cart",
        "is_cookie_deleted",
        "is_expected_active_tab",
        "is_expected_active_tab_approximate",
        "is_expected_bookmarks",
        "is_expected_installed_extensions",
        "is_expected_search_query",
        "is_expected_tabs",
        "is_expected_url_pattern_match",
        "is_extension_installed",
        "is_first_line_centered",
        "is_gold_text_included_in_pdf",
        "is_in_list",
        "is_in_vm_clickboard",
        "is_included_all_json_objects",
        "is_shortcut_on_desktop",
        "is_utc_0",
        "is_vlc_fullscreen",
        "is_vlc_playing",
        "is_vlc_recordings_folder",
        "literal_match",
        "match_in_list",
        "run_sqlite3",
    }
)


class OSWorldImportError(TaskSpecError):
    """An OSWorld task that cannot be imported; the message names the task and the item."""


def import_osworld_task(doc: Mapping[str, Any], *, id_prefix: str = "osworld") -> TaskSpec:
    """The `flywheel-task/1` spec of one OSWorld task document; OSWorldImportError if any part of it
    has no faithful equivalent on our desktops."""
    if not isinstance(doc, Mapping):
        raise OSWorldImportError(f"OSWorld task: must be a JSON object, got {type(doc).__name__}")
    raw_id = doc.get("id")
    if not isinstance(raw_id, str) or not raw_id.strip():
        raise OSWorldImportError("OSWorld task: id must be a non-empty string")
    imp = _Importer(raw_id)
    unknown = sorted(set(map(str, doc)) - TASK_KEYS)
    if unknown:
        raise imp.error("task", f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(TASK_KEYS))}")
    instruction = doc.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise imp.error("instruction", "must be a non-empty string")
    apps = doc.get("related_apps", [])
    if not isinstance(apps, list) or not all(isinstance(a, str) for a in apps):
        raise imp.error("related_apps", "must be a list of strings")
    imp.check_platform(doc, apps)
    config = doc.get("config", [])
    if not isinstance(config, list):
        raise imp.error("config", "must be a list of setup steps")
    setup: list[dict[str, Any]] = [
        {"op": "exec", "command": "mkdir -p " + " ".join(f"{HOME}/{d}" for d in HOME_DIRS), "timeout": 10}
    ]
    for i, step in enumerate(config):
        setup.extend(imp.setup_step(f"config[{i}]", step))
    evaluator = doc.get("evaluator")
    if not isinstance(evaluator, Mapping):
        raise imp.error("evaluator", "must be an object")
    unknown = sorted(set(map(str, evaluator)) - EVALUATOR_KEYS)
    if unknown:
        raise imp.error("evaluator", f"unknown key(s) {', '.join(unknown)}")
    for key in ("proxy", "fixed_ip"):
        if doc.get(key) not in (None, False, True):
            raise imp.error(key, "must be true or false")
    if doc.get("proxy") or doc.get("fixed_ip"):
        imp.network.add(f"OSWorld runs it {'behind its proxy' if doc.get('proxy') else 'from a fixed IP'}")
    task: dict[str, Any] = {
        "format": FORMAT,
        "id": f"{id_prefix}/{raw_id.strip().lower()}",
        "title": _title(instruction),
        "instruction": instruction,
        "platform": "desktop",
        "profile": PROFILE,
        "setup": setup,
        "limits": {"max_steps": 15, "max_seconds": 900},
        "description": f"Imported from OSWorld task {raw_id}"
        + (f" ({doc['source']})" if isinstance(doc.get("source"), str) and doc["source"] else ""),
        "origin": {"osworld": json.loads(json.dumps(doc))},
    }
    if evaluator.get("func") == "infeasible":
        if set(evaluator) - {"func", "postconfig"} and any(evaluator.get(k) for k in ("result", "expected")):
            raise imp.error("evaluator", "an infeasible task has no result or expected to read")
        task["infeasible"] = True
    else:
        task["checker"] = imp.checker(evaluator)
    needs = sorted({*imp.apps, *(a.lower() for a in apps)})
    task["tags"] = ["osworld", *(f"app:{a}" for a in needs)]
    if isinstance(doc.get("snapshot"), str):
        task["tags"].append(f"osworld-snapshot:{doc['snapshot']}")
    if imp.network:
        task["tags"].append("needs:network")
        task["description"] += ". Needs the network: " + "; ".join(sorted(imp.network))
    try:
        return parse_task(task)
    except OSWorldImportError:
        raise
    except TaskSpecError as exc:
        raise imp.error("task", f"the imported document is not a valid task: {exc}") from None


def import_osworld_files(
    paths: Iterable[str | Path], *, id_prefix: str = "osworld"
) -> tuple[list[TaskSpec], list[tuple[str, str]]]:
    """Import OSWorld task files: (the imported specs, (path, reason) of each file skipped). A file in a
    folder named after an OSWorld domain (`DOMAINS`) gets the id `<id_prefix>/<domain>/<id>`."""
    imported: list[TaskSpec] = []
    skipped: list[tuple[str, str]] = []
    seen: set[str] = set()
    for path in paths:
        p = Path(path)
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            skipped.append((str(p), f"cannot read OSWorld task JSON: {exc}"))
            continue
        domain = p.parent.name
        prefix = f"{id_prefix}/{domain}" if domain in DOMAINS else id_prefix
        if "Windows" in p.parts and isinstance(doc, Mapping):
            doc = {**doc, "related_apps": [*doc.get("related_apps", []), "windows"]}
        try:
            spec = import_osworld_task(doc, id_prefix=prefix)
        except TaskSpecError as exc:
            skipped.append((str(p), str(exc)))
            continue
        if spec.id in seen:
            skipped.append((str(p), f"duplicate task id {spec.id}"))
            continue
        seen.add(spec.id)
        imported.append(spec)
    return imported, skipped


def _title(instruction: str, limit: int = 80) -> str:
    one_line = " ".join(instruction.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1].rstrip() + "…"


class _Importer:
    """The conversions of one task (so every error names it), and what the task turned out to need."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.apps: set[str] = set()
        self.network: set[str] = set()

    def error(self, where: str, why: str) -> OSWorldImportError:
        return OSWorldImportError(f"OSWorld task {self.task_id}: {where}: {why}")

    def check_platform(self, doc: Mapping[str, Any], apps: list[str]) -> None:
        windows = sorted({a.lower() for a in apps} & WINDOWS_APPS)
        if isinstance(doc.get("snapshot"), str) and doc["snapshot"].lower() in WINDOWS_APPS:
            windows.append(f"snapshot {doc['snapshot']}")
        paths = [m for m in _paths(doc) if _WINDOWS_PATH.search(m)]
        if windows or paths:
            what = ", ".join([*windows, *(f"path {p}" for p in paths[:1])])
            raise self.error("platform", f"a Windows task ({what}); our desktops run Linux")

    # --- setup ----------------------------------------------------------------------------------
    def setup_step(self, where: str, step: Any) -> list[dict[str, Any]]:
        if not isinstance(step, Mapping) or not isinstance(step.get("type"), str):
            raise self.error(where, "must be an object with a type")
        if set(step) - {"type", "parameters"}:
            raise self.error(where, f"unknown key(s) {', '.join(sorted(set(step) - {'type', 'parameters'}))}")
        kind = step["type"]
        where = f"{where} ({kind})"
        params = step.get("parameters", {})
        if not isinstance(params, Mapping):
            raise self.error(where, "parameters must be an object")
        if kind in SETUP_REFUSED:
            raise self.error(where, SETUP_REFUSED[kind])
        handlers = {
            "download": (self.download, {"files"}),
            "execute": (self.execute, {"command", "shell", "until", "stdout", "stderr"}),
            "command": (self.execute, {"command", "shell", "until", "stdout", "stderr"}),
            "launch": (self.launch, {"command", "shell"}),
            "open": (self.open, {"path"}),
            "chrome_open_tabs": (self.open_tabs, {"urls_to_open"}),
            "activate_window": (self.window, {"window_name", "strict", "by_class"}),
            "close_window": (self.window, {"window_name", "strict", "by_class"}),
            "sleep": (self.sleep, {"seconds"}),
        }
        if kind not in handlers:
            raise self.error(where, f"this setup type is not supported (supported: {', '.join(handlers)})")
        handler, known = handlers[kind]
        extra = sorted(set(map(str, params)) - known)
        if extra:
            raise self.error(where, f"unknown parameter(s) {', '.join(extra)}")
        return handler(kind, params, where)

    def download(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        files = params.get("files")
        if not isinstance(files, list) or not files:
            raise self.error(where, "files must be a non-empty list of {url, path}")
        steps = []
        for j, f in enumerate(files):
            if not isinstance(f, Mapping) or set(f) != {"url", "path"}:
                raise self.error(f"{where} files[{j}]", "must be an object with exactly url and path")
            url, path = f["url"], f["path"]
            if not isinstance(url, str) or not _URL.match(url):
                raise self.error(f"{where} files[{j}]", f"url must be http(s), got {url!r}")
            path = self.home_path(path, f"{where} files[{j}]")
            steps.append({"op": "fetch", "url": url, "path": path, "timeout": 300})
        return steps

    def execute(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        if params.get("until"):
            raise self.error(where, "`until` (retry until an output appears) is not supported")
        for key in ("stdout", "stderr"):
            if params.get(key):
                raise self.error(
                    where, f"`{key}` (saves the output in OSWorld's host cache) is not mapped yet"
                )
        command = params.get("command")
        code = _pyautogui_code(command)
        if code is not None:
            return [{"op": "pyautogui", "code": code, "screen": SCREEN, "timeout": 60}]
        text = self.command(command, bool(params.get("shell", False)), where)
        return [{"op": "exec", "command": text, "timeout": 120}]

    def command(self, command: Any, shell: bool, where: str) -> str:
        """The shell text of an OSWorld command (an argv list or a string)."""
        if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
            argv = ["python3" if command[0] == "python" else command[0], *command[1:]]
            # OSWorld's server expands a leading ~ of each argument (os.path.expanduser).
            argv = [HOME + a[1:] if a == "~" or a.startswith("~/") else a for a in argv]
            text = " ".join(argv) if shell else shlex.join(argv)
        elif isinstance(command, str) and command.strip():
            text = re.sub(r"^(\s*)python(?=\s)", r"\1python3", command)
        else:
            raise self.error(where, "command must be a non-empty string or list of strings")
        if _SUDO.search(text):
            raise self.error(where, "the command needs root (sudo), which our desktops do not give")
        if "pyautogui" in text:
            raise self.error(where, "pyautogui is run only as `python -c <script>` of pyautogui calls")
        placeholder = _PLACEHOLDER.search(text)
        if placeholder:
            raise self.error(
                where, f"OSWorld's placeholder {placeholder.group()} has no value on our desktops"
            )
        if _WEB_URL.search(text):
            self.network.add(f"{where} reaches a web host")
        return text

    def launch(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        command = params.get("command")
        if isinstance(command, str):
            try:
                argv = shlex.split(command)
            except ValueError as exc:
                raise self.error(where, f"command cannot be split: {exc}") from None
        elif isinstance(command, list) and all(isinstance(a, str) for a in command):
            argv = list(command)
        else:
            raise self.error(where, "command must be a string or a list of strings")
        if not argv:
            raise self.error(where, "command is empty")
        program = PurePosixPath(argv[0]).name
        if program in SKIPPED_LAUNCHES:
            return []
        if program in UNAVAILABLE_PROGRAMS:
            raise self.error(where, UNAVAILABLE_PROGRAMS[program])
        if program not in LAUNCH_APPS:
            raise self.error(
                where,
                f"program {program!r} has no counterpart among our apps (mapped: {', '.join(LAUNCH_APPS)})",
            )
        app, flags = LAUNCH_APPS[program]
        args = []
        for arg in argv[1:]:
            if arg.startswith("-"):
                if arg.startswith(DROPPED_FLAGS):
                    continue
                # The same program here as in OSWorld's image takes its flags as they are.
                if program != app and not (flags and arg.startswith(flags)):
                    raise self.error(where, f"flag {arg!r} of {program} has no mapping for {app}")
            elif _WEB_URL.match(arg):
                self.network.add(f"{where} opens {arg}")
            args.append(arg)
        self.apps.add(app)
        return [{"op": "launch", "app": app, "args": args, "timeout": 60}]

    def open(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        path = params.get("path")
        if not isinstance(path, str) or not path.strip():
            raise self.error(where, "path must be a non-empty string")
        suffix = PurePosixPath(path).suffix.lower()
        if path.endswith("/") or not suffix:
            app = "pcmanfm"  # OSWorld opens a folder in the file manager
        else:
            app = OPEN_APPS.get(suffix, "")
            if not app:
                raise self.error(where, f"no app of ours opens {suffix} files ({path})")
        self.apps.add(app)
        return [{"op": "launch", "app": app, "args": [path], "timeout": 60}]

    def open_tabs(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        urls = params.get("urls_to_open")
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u for u in urls):
            raise self.error(where, "urls_to_open must be a non-empty list of URLs")
        for url in urls:
            if _WEB_URL.match(url):
                self.network.add(f"{where} opens {url}")
        self.apps.add("chromium")
        return [{"op": "launch", "app": "chromium", "args": list(urls), "timeout": 60}]

    def window(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        name = params.get("window_name")
        if not isinstance(name, str) or not name:
            raise self.error(where, "window_name must be a non-empty string")
        for key in ("strict", "by_class"):
            if not isinstance(params.get(key, False), bool):
                raise self.error(where, f"{key} must be true or false")
        for theirs, ours in WINDOW_NAMES.items():
            name = name.replace(theirs, ours)
        return [
            {
                "op": "window",
                "action": "activate" if kind == "activate_window" else "close",
                "name": name,
                "strict": bool(params.get("strict", False)),
                "by_class": bool(params.get("by_class", False)),
                "check": False,  # OSWorld logs a window it cannot find and goes on
                "timeout": 30,
            }
        ]

    def sleep(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        seconds = params.get("seconds")
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 <= seconds <= 590:
            raise self.error(where, "seconds must be a number in [0, 590]")
        return [{"op": "wait", "seconds": seconds, "timeout": seconds + 10}]

    # --- evaluator ------------------------------------------------------------------------------
    def checker(self, ev: Mapping[str, Any]) -> dict[str, Any]:
        funcs = ev.get("func")
        single = isinstance(funcs, str)
        funcs = [funcs] if single else funcs
        if not isinstance(funcs, list) or not funcs or not all(isinstance(f, str) for f in funcs):
            raise self.error("evaluator.func", "must be a function name or a list of them")
        if "infeasible" in funcs:
            raise self.error("evaluator.func", "infeasible must be the only function")
        n = len(funcs)
        results = self.per_func(ev.get("result"), n, single, "result")
        has_expected = bool(ev.get("expected"))
        expecteds = self.per_func(ev.get("expected"), n, single, "expected") if has_expected else [None] * n
        options = self.per_func(ev.get("options", {} if single else [{}] * n), n, single, "options")
        conj = ev.get("conj", "and")
        if conj not in ("and", "or"):
            raise self.error("evaluator.conj", f"{conj!r} is not and / or")
        before = ev.get("postconfig", [])
        if not isinstance(before, list):
            raise self.error("evaluator.postconfig", "must be a list of setup steps")
        checks = [
            self.check(f, r, e, o, has_expected, i if not single else None)
            for i, (f, r, e, o) in enumerate(zip(funcs, results, expecteds, options, strict=True))
        ]
        checker: dict[str, Any] = {"combine": "all_mean" if conj == "and" else "any", "checks": checks}
        steps = [
            s for i, step in enumerate(before) for s in self.setup_step(f"evaluator.postconfig[{i}]", step)
        ]
        if steps:
            checker["before"] = steps
        return checker

    def per_func(self, value: Any, n: int, single: bool, name: str) -> list[Any]:
        if single:
            return [value]
        if not isinstance(value, list) or len(value) != n:
            raise self.error(f"evaluator.{name}", f"must be a list of {n} (one per function)")
        return value

    def check(
        self, func: str, result: Any, expected: Any, options: Any, has_expected: bool, i: int | None
    ) -> dict[str, Any]:
        where = f"evaluator.func {func!r}" if i is None else f"evaluator.func[{i}] {func!r}"
        if func not in OSWORLD_METRICS:
            raise self.error(where, "is not one of OSWorld's metric functions (desktop-env 1.0.2)")
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise self.error(f"{where} options", "must be an object")
        check: dict[str, Any] = {
            "probe": self.getter(result, f"{where} result"),
            "metric": "osworld",
            "options": {"func": func, "options": dict(options), "expected_given": has_expected},
        }
        if not has_expected:
            return check
        if isinstance(expected, Mapping) and expected.get("type") == "rule":
            if set(expected) - {"type", "rules"}:
                raise self.error(
                    f"{where} expected",
                    f"unknown key(s) {', '.join(sorted(set(expected) - {'type', 'rules'}))}",
                )
            check["expected"] = expected.get("rules")
        else:
            check["expected_probe"] = self.getter(expected, f"{where} expected")
        return check

    def getter(self, getter: Any, where: str) -> dict[str, Any]:
        """Our probe for an OSWorld getter."""
        if not isinstance(getter, Mapping) or not isinstance(getter.get("type"), str):
            raise self.error(where, "must be a getter object with a type")
        kind = getter["type"]
        where = f"{where} ({kind})"
        if kind in GETTER_REFUSED:
            raise self.error(where, GETTER_REFUSED[kind])
        known = {
            "vm_file": {"path", "dest", "multi", "gives", "time_suffix", "time_format"},
            "cloud_file": {"path", "dest", "multi", "gives"},
            "vm_command_line": {"command", "shell"},
            "vm_command_error": {"command", "shell"},
            "gimp_config_file": {"dest", "file_name"},
        }
        if kind not in known:
            raise self.error(where, f"this getter is not supported (supported: {', '.join(known)}, rule)")
        extra = sorted(set(map(str, getter)) - known[kind] - {"type"})
        if extra:
            raise self.error(where, f"unknown key(s) {', '.join(extra)}")
        if kind == "vm_file":
            return self.vm_file(getter, where)
        if kind == "cloud_file":
            if getter.get("multi"):
                paths, dests = getter.get("path"), getter.get("dest")
                if not (isinstance(paths, list) and isinstance(dests, list) and len(paths) == len(dests)):
                    raise self.error(where, "multi needs path and dest lists of one length")
                gives = getter.get("gives", [0])
                if not isinstance(gives, list) or len(gives) != 1 or gives[0] not in range(len(paths)):
                    raise self.error(where, "multi cloud files are mapped only when gives names one of them")
                url, dest = paths[gives[0]], dests[gives[0]]
            else:
                url, dest = getter.get("path"), getter.get("dest")
            if not isinstance(url, str) or not _URL.match(url):
                raise self.error(where, f"path must be an http(s) URL, got {url!r}")
            return {"op": "fetch", "url": url, "name": _name(dest, url)}
        if kind in ("vm_command_line", "vm_command_error"):
            command = self.command(getter.get("command"), bool(getter.get("shell", False)), where)
            if kind == "vm_command_error":
                command = f"{{ {command}\n}} 2>&1 >/dev/null"
            return {"op": "exec", "command": command, "any_exit": True, "timeout": 60}
        # gimp_config_file: OSWorld reads ~/.config/GIMP/2.10/<file_name>.
        name = getter.get("file_name")
        if not isinstance(name, str) or not name or "/" in name:
            raise self.error(where, "file_name must be a file name")
        return {
            "op": "file",
            "path": f".config/GIMP/2.10/{name}",
            "raw": True,
            "name": _name(getter.get("dest"), name),
        }

    def vm_file(self, getter: Mapping[str, Any], where: str) -> dict[str, Any]:
        # OSWorld tests `multi` for truth (`config.get("multi", False)`): "true" counts, as there.
        if not getter.get("multi"):
            path = getter.get("path")
            if not isinstance(path, str):
                raise self.error(where, "path must be a string (a list needs multi: true)")
            return {
                "op": "file",
                "path": self.home_path(path, where),
                "raw": True,
                "name": _name(getter.get("dest"), path),
            }
        paths, dests = getter.get("path"), getter.get("dest")
        if not (isinstance(paths, list) and isinstance(dests, list) and len(paths) == len(dests) and paths):
            raise self.error(where, "multi needs path and dest lists of one length")
        gives = getter.get("gives", [0])
        if not isinstance(gives, list) or not all(isinstance(g, int) and 0 <= g < len(paths) for g in gives):
            raise self.error(where, f"gives must list indices into the {len(paths)} paths")
        return {
            "op": "files",
            "paths": [self.home_path(p, where) for p in paths],
            "names": [_name(d, p) for d, p in zip(dests, paths, strict=True)],
            "gives": gives,
        }

    def home_path(self, path: Any, where: str) -> str:
        """A path under /home/user (or ~), relative to the workspace."""
        if not isinstance(path, str) or not path:
            raise self.error(where, f"path must be a non-empty string, got {path!r}")
        p = PurePosixPath(path)
        if p.parts[:1] == ("~",):
            p = PurePosixPath(HOME, *p.parts[1:])
        elif not p.is_absolute():
            p = PurePosixPath(HOME, p)  # OSWorld's server runs in the home folder
        try:
            rel = p.relative_to(HOME)
        except ValueError:
            raise self.error(
                where, f"{path} is outside {HOME}, the only place our sandboxes give files"
            ) from None
        if ".." in rel.parts or not rel.parts:
            raise self.error(where, f"{path} does not name a file under {HOME}")
        return str(rel)


def _name(dest: Any, path: Any) -> str:
    """The file name a metric sees: OSWorld's `dest`, else the path's last part."""
    if isinstance(dest, str) and dest and "/" not in dest:
        return dest
    return PurePosixPath(str(path).split("?", 1)[0]).name or "file"


def _pyautogui_code(command: Any) -> str | None:
    """The script of a `python -c "import pyautogui; …"` command, else None."""
    if (
        isinstance(command, list)
        and len(command) == 3
        and command[0] in ("python", "python3")
        and command[1] == "-c"
        and isinstance(command[2], str)
        and "pyautogui" in command[2]
    ):
        return command[2]
    return None


def _paths(value: Any, key: str = "") -> Iterable[str]:
    """Every string given as a path (a `path` key) anywhere in a task document."""
    if isinstance(value, str) and key == "path":
        yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _paths(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _paths(v, key)
