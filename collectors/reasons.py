"""Why an artifact could not be read, or only in part, in both report languages.

Every reason a reader gives is written from a template of ``templates/reasons.yaml``,
which holds its Chinese wording beside it: ``reason()`` fills both with the same values.
The English text is what errors and facts always carried (``problem``); an
``artifact_problem`` fact also carries the Chinese one (``problem_zh``), which Chinese
reports show. Readers join reasons, add a fix or name a file through the helpers here, so
both texts keep the same shape; text from elsewhere (a library's own message) stays as it
is in both. A test reads every ``reason(...)`` call in the package and checks that its
template is listed.
"""

from __future__ import annotations

import string
from functools import lru_cache

TEXT_LIMIT = 300                # characters of a reason kept in a fact


class Reason(str):
    """English text that knows its Chinese wording (``zh``)."""
    zh: str

    def __new__(cls, english: str, chinese: str) -> Reason:
        made = super().__new__(cls, english)
        made.zh = chinese
        return made

    def __reduce__(self):               # errors carrying one cross processes pickled
        return Reason, (str(self), self.zh)


def reason(template: str, /, **values) -> Reason:
    """``template`` (listed in reasons.yaml) filled with ``values``, in both languages."""
    english = template.format(**values)
    chinese = _chinese().get(template)
    if chinese is None:                 # not listed (a test keeps this from shipping)
        return Reason(english, english)
    shown = {}                          # each value as the English text writes it
    formatter = string.Formatter()
    for _, name, spec, conversion in formatter.parse(template):
        if name is not None:
            shown[name] = formatter.format_field(
                formatter.convert_field(values[name], conversion), spec or "")
    return Reason(english, chinese.format(**shown))


def zh(text: str) -> str:
    """The Chinese wording of a reason; other text as it is."""
    return text.zh if isinstance(text, Reason) else str(text)


def joined(reasons) -> Reason:
    """Several reasons, one text."""
    reasons = list(reasons)
    return Reason("; ".join(map(str, reasons)), "；".join(map(zh, reasons)))


def with_fix(problem: str, fix: str | None) -> Reason:
    """A reason followed by what to do about it."""
    if not fix:
        return Reason(str(problem), zh(problem))
    return Reason(f"{problem} ({fix})", f"{zh(problem)}（{zh(fix)}）")


def of_exception(exc: BaseException) -> Reason:
    """The reason an exception carries: the reader's own, else the exception's text."""
    given = exc.args[0] if exc.args else None
    if isinstance(given, Reason):
        return given
    text = str(exc) or type(exc).__name__
    return Reason(text, text)


def artifact_problem(file: str, problem: str, partial: bool, source: str) -> dict:
    """The fact of an artifact read only in part, or not at all, and why."""
    return {"type": "artifact_problem", "file": file, "problem": str(problem)[:TEXT_LIMIT],
            "problem_zh": zh(problem)[:TEXT_LIMIT], "partial": partial, "source": source}


@lru_cache(maxsize=1)
def _chinese() -> dict[str, str]:
    from qcdoctor.package_data import load_yaml
    return {entry["en"]: entry["zh"] for entry in load_yaml("qcdoctor.templates",
                                                            "reasons.yaml")}
