"""Why an artifact could not be read, or only in part: the English text that facts and
errors carry, written from a template listed in ``templates/reasons.yaml`` with its
Chinese wording beside it.

Facts keep that one text (the JSON report and the engine see English, as before); a
report in Chinese puts it back into Chinese by matching it against the templates
(``engine/reason_words.py``). A test reads every ``reason(...)`` call in the package and
checks its template is listed, so no new reason goes untranslated.
"""

from __future__ import annotations


def reason(template: str, /, **values) -> str:
    """``template`` (a ``str.format`` template from reasons.yaml) filled with ``values``."""
    return template.format(**values)
