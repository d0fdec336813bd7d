"""What OSWorld's task files name, and what each becomes here (agent_core.tasks.osworld maps with it)."""

from __future__ import annotations

import re

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
# `launch` of pkill/killall (OSWorld's postconfig quits Chrome so it writes its profile): the process
# name there → ours.
KILLERS = ("pkill", "killall")
PROCESS_NAMES = {
    **dict.fromkeys(("chrome", "google-chrome", "chromium", "chromium-browser"), "chromium"),
    **dict.fromkeys(("soffice", "soffice.bin", "libreoffice"), "soffice"),
    **{name: name for name in ("gimp", "vlc", "thunderbird")},
}
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
    "upload_file": "uploads a file from OSWorld's host",
    "update_browse_history": "writes Chrome's history database, which our sandboxes do not do yet",
    "execute_with_verification": "verifies through OSWorld's VM server",
    "proxy": "configures OSWorld's network proxy",
}
GETTER_REFUSED = {
    "vm_terminal_output": "reads GNOME Terminal's text through accessibility, which xterm does not expose",
    "googledrive_file": "needs a Google Drive account and the network",
    "info_from_website": "reads a live web site",
    "vscode_config": "VS Code is not packaged for Debian, so our desktops do not have it",
    **dict.fromkeys(
        ("number_of_search_results", "url_path_parse", "gotoRecreationPage_and_get_html_content"),
        "reads a live web site through Chrome's DevTools (not mapped yet)",
    ),
    "shortcuts_on_desktop": "not mapped yet",
}  # fmt: skip
# OSWorld's getters of Chrome's live state: run as they are (osworld_worker.py), connected over CDP to the
# desktop's Chromium; the config keys each reads. Those that find the active tab's URL first read the
# accessibility tree in OSWorld's XML form (`A11Y_TREE_GETTERS`), where its x86 selector looks for
# "Google Chrome": the name OSWorld's image has for the browser (`A11Y_RENAMES`).
_HTML_PARSE = (
    "category", "class_singleObject", "class_multiObject", "class_multiObject_child", "class_multiObject_li",
    "class_multiObject_only_child", "class_multiObject_search_exist", "inputObject", "labelObject",
    "url_include_expected", "url_include_expected_multichoice", "xpathObject",
)  # fmt: skip
DEVTOOLS_GETTERS = {
    "open_tabs_info": frozenset(),
    "page_info": frozenset({"url"}),
    "active_url_from_accessTree": frozenset({"goto_prefix"}),
    "active_tab_info": frozenset({"goto_prefix"}),
    "active_tab_url_parse": frozenset({"goto_prefix", "parse_keys", "replace", "split_list"}),
    "active_tab_html_parse": frozenset({"goto_prefix", *_HTML_PARSE}),
    "url_dashPart": frozenset({"goto_prefix", "key", "partIndex", "returnType", "needDeleteId"}),
    "macys_product_url_parse": frozenset({"goto_prefix", "parse_keys"}),
}
A11Y_TREE_GETTERS = frozenset(DEVTOOLS_GETTERS) - {"open_tabs_info", "page_info"}
A11Y_RENAMES = {"Chromium": "Google Chrome"}
# OSWorld's getters that read one file of the VM (through its get_vm_file) and make something of it: run as
# they are (osworld_worker.py) on that file as the probe read it. The config key naming the file, the
# other keys each reads.
VM_FILE_GETTERS = {
    "audio_in_slide": ("ppt_file_path", frozenset({"slide_index", "dest"})),
    "background_image_in_slide": ("ppt_file_path", frozenset({"slide_index", "dest"})),
    "content_from_vm_file": ("path", frozenset({"file_type", "file_content"})),
}
# OSWorld's getters that read Chrome's profile files (through its controller's get_file): run as they are
# (osworld_worker.py) on those files of our Chromium's profile. The files by their place in the profile.
CHROME_PROFILE = ".config/chromium"  # Chromium's --user-data-dir on our desktops, under the home folder
CHROME_FILE_GETTERS = {
    **dict.fromkeys(
        (
            "profile_name", "chrome_font_size", "default_search_engine", "new_startup_page",
            "data_delete_automacally", "enable_do_not_track", "enable_enhanced_safety_browsing",
            "enable_safe_browsing", "find_unpacked_extension_path", "find_installed_extension_name",
        ),
        ("Default/Preferences",),
    ),
    "bookmarks": ("Default/Bookmarks",),
    "chrome_language": ("Local State",),
    "enabled_experiments": ("Local State",),
    "history": ("Default/History",),
    "cookie_data": ("Default/Cookies",),
}  # fmt: skip
PLACEHOLDER = re.compile(r"(?<!\$)\{[A-Z][A-Z0-9_]*\}")
URL = re.compile(r"https?://", re.IGNORECASE)
WEB_URL = re.compile(r"https?://(?!(localhost|127\.0\.0\.1)[:/])", re.IGNORECASE)
SUDO = re.compile(r"(^|[\s;&|(`])sudo(\s|$)")
# Root-only set-up steps of OSWorld's tasks that our office desktops already satisfy: the packages its
# tasks install (scripts/office-apps.sh installs them), and apt's package lists (our image is fixed). A
# command of such steps chained with && keeps its other steps; any other sudo is refused.
ROOT_INSTALLS = {"apt": frozenset({"expect", "unzip"}), "pip": frozenset({"pysrt"})}
ROOT_STEP = re.compile(
    r"^\s*(?:echo\s+(?:'password'|\"password\"|password)\s*\|\s*)?sudo\s+(?:-S\s+)?"
    r"(?:(?P<apt>apt-get|apt)\s+(?P<verb>update|install)|(?P<pip>pip3?)\s+install)"
    r"(?P<rest>(?:\s+[-\w.=]+)*)\s*$"
)
WINDOWS_PATH = re.compile(r"^[a-zA-Z]:[\\/]|\\\\")

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
