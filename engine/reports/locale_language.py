"""The language to talk in when neither --lang nor the case says it: the user's locale."""

from __future__ import annotations

import os

DEFAULT_LANGUAGE = "zh"


def locale_language(environ=None) -> str:
    """zh or en from LC_ALL / LC_MESSAGES / LANG, the first one set (POSIX precedence).
    A Chinese locale gives zh, any other named language en; C / POSIX say nothing about
    the user's language and fall back to the default, zh."""
    environ = os.environ if environ is None else environ
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        value = (environ.get(name) or "").strip()
        if not value:
            continue
        language = value.split(".")[0].split("@")[0].split("_")[0].lower()
        if language in ("c", "posix"):
            return DEFAULT_LANGUAGE
        return "zh" if language == "zh" else "en"
    return DEFAULT_LANGUAGE
