"""The one rule that picks the language of everything a run prints or writes
(docs/reports.md, "Language"): an explicit ``--lang`` / ``lang=`` first, then the case's
``language:``, then the user's locale."""

from __future__ import annotations

import os

DEFAULT_LANGUAGE = "zh"


def chosen_language(explicit: str | None = None, case_language: str | None = None,
                    environ=None) -> str:
    """zh or en: ``explicit`` (--lang, lang=) when given, else the case's language, else
    the locale's. Every command and API call picks its language here."""
    return explicit or case_language or locale_language(environ)


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
