"""The report of a triage or an audit as Python objects: frozen dataclasses read from the
JSON report (schema ``qcdoctor/report-v1``, the document ``--format json`` prints), which
also renders it in every format of the command line, in either language, and saves it.

>>> import qcdoctor
>>> report = qcdoctor.triage(example="convert_j6e_no_retrain", lang="en")
>>> report.conclusion.stage, report.conclusion.determined
('convert', True)
>>> report.next_actions[0].kind
'consistency_strategy'
>>> report.to_dict()["conclusion"]["stage"]
'convert'
>>> report.to_markdown().startswith('# Consistency diagnosis report')
True
>>> report.in_language("zh").language
'zh'
"""

from __future__ import annotations

import copy
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from qcdoctor.errors import QcdoctorError

LANGUAGES = ("zh", "en")
# every format the command line writes a single report in
RENDER_FORMATS = ("md", "html", "json", "sarif", "junit")
# a saved report's format, by the file name's ending
SUFFIX_FORMATS = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html",
                  ".json": "json", ".sarif": "sarif", ".xml": "junit"}
FAIL_LEVELS = ("info", "warning", "error", "never")


def frozen(value: Any) -> Any:
    """``value`` read-only all the way down: mappings as mapping proxies, lists as tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


def _record(cls, data: Mapping, **nested: Callable[[Any], Any]):
    """A ``cls`` from the report's mapping ``data``: each field from the key of its name
    (absent: None), through ``nested[name]`` when given, else made read-only."""
    values = {}
    for item in fields(cls):
        raw = data.get(item.name)
        if raw is not None:
            values[item.name] = nested.get(item.name, frozen)(raw)
        elif item.default_factory is not MISSING:
            values[item.name] = frozen(item.default_factory())
        else:                       # absent or null: the field's default, else None
            values[item.name] = None if item.default is MISSING else item.default
    return cls(**values)


def _each(cls, **nested) -> Callable[[Any], tuple]:
    return lambda items: tuple(_record(cls, item, **nested) for item in items or ())


@dataclass(frozen=True)
class Evidence:
    """One line of the conclusion's evidence: what a rule concluded from the facts."""
    rule: str = ""
    text: str = ""
    severity: str | None = None
    overridden: bool = False          # replaced by a conclusion of higher priority


@dataclass(frozen=True)
class Conclusion:
    """Which stage broke the model: ``stage`` (``convert``, ``compile``, ``user_side``,
    ``undetermined``, ...), ``determined`` (False: the stage most likely, not proven),
    ``suspect`` (the likely cause), and the ``evidence`` behind it."""
    stage: str
    suspect: str = ""
    determined: bool = False
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True)
class NextAction:
    """A next step, smallest verifiable first: its ``kind`` (``evaluate_stage``,
    ``quant_analysis``, ``consistency_strategy``, ...), the ``text`` saying it and the
    ready-to-paste ``code`` when it has some; ``remedy``: a change to the model (a fixed
    scale, qint16, per-channel weights, the measured fix), not information to give."""
    id: str
    kind: str
    text: str = ""
    code: str | None = None
    cost: str | None = None
    rule: str | None = None
    analysis_model_type: str | None = None
    baseline: str | None = None
    analysis: str | None = None
    stage_to_evaluate: str | None = None
    remedy: bool = False


@dataclass(frozen=True)
class Finding:
    """A finding of a rule, with the facts it was drawn from (``evidence``: read-only)."""
    rule: str
    severity: str
    title: str = ""
    text: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class ChecklistPart:
    """A finer check rolled up into a mandatory checklist item."""
    id: str
    status: str
    title: str = ""


@dataclass(frozen=True)
class ChecklistItem:
    """A deployment checklist item: ``status`` is pass, fail, unknown or not_applicable;
    ``provide`` says what would decide an unknown one."""
    id: str
    status: str
    title: str = ""
    mandatory: bool = False
    evidence: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)
    parts: tuple[ChecklistPart, ...] = ()
    provide: str | None = None


@dataclass(frozen=True)
class MissingItem:
    """Something the rules still need to conclude, as a question to answer."""
    id: str
    question: str
    why: str | None = None
    rule: str | None = None


@dataclass(frozen=True)
class Pitfall:
    """A common mistake the case shows (in ``pitfalls``) or comes close to (``cautions``)."""
    id: str
    text: str
    correct_practice: str | None = None
    rule: str | None = None
    severity: str | None = None


@dataclass(frozen=True)
class Consistency:
    """Whether the high-consistency QAT strategy applies, and at which level."""
    applicable: bool | None = None
    level: int | None = None
    requires_retrain: bool | None = None
    prerequisites_met: bool | None = None
    text: str = ""
    old_level: int | None = None
    rule: str | None = None


@dataclass(frozen=True)
class KeptArtifact:
    """A file to keep for support, and whether the case has it."""
    name: str
    present: bool = False
    path: str | None = None


class Origin:
    """How a report was made: what builds its JSON report in a language (cached), and
    the files it must never be saved over (the case's own: its case.yaml, the bundle,
    every file the triage read)."""

    def __init__(self, build: Callable[[str | None], dict], protected: Sequence[Path] = ()):
        self._build = build
        self.protected = list(protected)
        self._made: dict[str | None, Report] = {}
        self._lock = threading.Lock()

    def report(self, lang: str | None, audit: bool) -> Report:
        """The report in ``lang`` (None: the case's language), built once."""
        with self._lock:
            if lang in self._made:
                return self._made[lang]
        made = report_from(self._build(lang), audit=audit, origin=self)
        with self._lock:
            self._made.setdefault(made.language, made)
            if lang is None:
                self._made.setdefault(None, made)
            return self._made[made.language]


def checked_language(lang: str | None) -> str | None:
    """``lang`` if it is a report language (or None); a QcdoctorError otherwise."""
    if lang is None:
        return lang
    return _one_of(lang, LANGUAGES, "lang", "report language", "use 'zh' or 'en'")


def _checked_format(fmt: str) -> str:
    return _one_of(fmt, RENDER_FORMATS, "format", "report format",
                   f"use one of {', '.join(RENDER_FORMATS)}")


def _one_of(word: Any, words: tuple[str, ...], key: str, what: str, fix: str) -> str:
    """``word`` as the one of ``words`` it is (a str Enum's member included); a
    QcdoctorError naming ``key`` otherwise, with the nearest word when one is close."""
    if isinstance(word, str) and word in words:
        return str.__str__(word)
    from qcdoctor.engine.api.values import shown
    near = ""
    if isinstance(word, str):
        from qcdoctor.suggest import did_you_mean
        near = did_you_mean(word, words)
    raise QcdoctorError(f"no {what} {shown(word)}{near}", key=key, fix=fix)


def format_of(path: str | os.PathLike) -> str:
    """The report format a file name asks for by its ending (``report.html``: html)."""
    suffix = Path(path).suffix.lower()
    if suffix in SUFFIX_FORMATS:
        return SUFFIX_FORMATS[suffix]
    raise QcdoctorError(f"no report format is known for the ending {suffix or '(none)'!r}",
                        file=os.fspath(path),
                        fix="name the file .md, .html, .json, .sarif or .xml (JUnit), or "
                            "give format= (md, html, json, sarif, junit)")


@dataclass(frozen=True, repr=False)
class Report:
    """A triage's (or an audit's) report: the conclusion, the next actions, findings,
    checklist and pitfalls as dataclasses, the whole JSON report by ``to_dict()``, and
    every rendering of the command line. In Jupyter it shows as the HTML report.

    ``language`` is the language its texts are in; ``in_language`` gives the same report
    in the other one, and every rendering takes ``lang=``.
    """
    language: str
    case_path: str
    title: str
    audit: bool
    conclusion: Conclusion
    missing: tuple[MissingItem, ...] = ()
    next_actions: tuple[NextAction, ...] = ()
    consistency: Consistency | None = None
    findings: tuple[Finding, ...] = ()
    checklist: tuple[ChecklistItem, ...] = ()
    pitfalls: tuple[Pitfall, ...] = ()
    cautions: tuple[Pitfall, ...] = ()
    keep: tuple[KeptArtifact, ...] = ()
    # the JSON report itself, how to make it in the other language, renderings made:
    # set once by report_from
    _data: Mapping = field(default_factory=dict, init=False, repr=False, compare=False,
                           hash=False)
    _origin: Origin | None = field(default=None, init=False, repr=False, compare=False,
                                   hash=False)
    _texts: dict = field(default_factory=dict, init=False, repr=False, compare=False,
                         hash=False)

    @classmethod
    def from_dict(cls, data: Mapping, *, audit: bool = False) -> Report:
        """The report of a JSON report (``json.load`` of ``--format json``'s output),
        checked against the report schema: a QcdoctorError names the first key that does
        not fit. Such a report renders in its own language only."""
        from qcdoctor.engine.api.values import plain_data
        from qcdoctor.engine.reports.schema import check_report
        plain = plain_data(data, "")                    # a copy: the caller's stays theirs
        return report_from(check_report(plain, "report"), audit=audit)

    def to_dict(self) -> dict:
        """The JSON report, exactly as ``qcdoctor triage --format json`` prints it (a new
        copy each time)."""
        return json.loads(self.to_json())

    def to_json(self, lang: str | None = None) -> str:
        """The JSON report as text, as ``--format json`` writes it."""
        return self.render("json", lang=lang)

    def to_markdown(self, lang: str | None = None) -> str:
        """The Markdown report (the audit's checklist page for an audit)."""
        return self.render("md", lang=lang)

    def to_html(self, lang: str | None = None) -> str:
        """The HTML report: one self-contained page, plots inline, no network."""
        return self.render("html", lang=lang)

    def to_text(self, lang: str | None = None, *, width: int = 100, color: bool = False) -> str:
        """The report as the terminal shows it; ANSI colours when ``color``."""
        from qcdoctor.engine.reports.terminal import render_terminal
        report = self.in_language(lang)
        return render_terminal(report._copy(), audit=self.audit, color=color, width=width)

    def render(self, format: str, lang: str | None = None) -> str:
        """The report in ``format`` (md, html, json, sarif, junit) and ``lang``."""
        fmt = _checked_format(format)
        report = self.in_language(lang)
        key = (fmt, report.language)
        text = report._texts.get(key)
        if text is None:
            from qcdoctor.engine.reports.formats import render_output
            if fmt == "html":
                from qcdoctor.engine.api.interrupts import HeldInterrupts
                with HeldInterrupts() as hold:
                    hold()                  # matplotlib stopped mid-drawing can stay broken
                    text = render_output(report._copy(), fmt, audit=self.audit)
            else:
                text = render_output(report._copy(), fmt, audit=self.audit)
            report._texts[key] = text
        return text

    def save(self, path: str | os.PathLike, *, format: str | None = None,
             lang: str | None = None) -> Path:
        """Write the report to ``path`` atomically, in ``format`` (by default from the
        file name's ending: .md, .html, .json, .sarif, .xml for JUnit) and ``lang``.
        Never over the case's own files (its case.yaml, its bundle, anything the triage
        read). Returns the path."""
        from qcdoctor.engine.api.values import given_path
        path = given_path(path, "path")
        fmt = _checked_format(format) if format is not None else format_of(path)
        text = self.render(fmt, lang=lang)
        from qcdoctor.engine.commands.output_file import emit
        protected = self._origin.protected if self._origin is not None else []
        emit(text, os.fspath(path), protected)
        return path

    def in_language(self, lang: str | None) -> Report:
        """This report with its texts in ``lang`` (None: as it is)."""
        lang = checked_language(lang)
        if lang is None or lang == self.language:
            return self
        if self._origin is None:
            raise QcdoctorError(f"this report was read from its JSON and is in "
                                f"{self.language} only", key="lang",
                                fix=f"triage the case again with lang={lang!r}")
        return self._origin.report(lang, self.audit)

    def fails(self, level: str = "warning") -> bool:
        """Whether the report holds an item at or above ``level`` (info, warning, error;
        never: False), as ``--fail-on`` judges it (a failed checklist item is an error)."""
        level = _one_of(level, FAIL_LEVELS, "level", "level",
                        f"use one of {', '.join(FAIL_LEVELS)}")
        from qcdoctor.engine.diagnosis.diagnose import fails_on
        return fails_on(dict(self._data), level)

    def _copy(self) -> dict:
        """The JSON report to render from: the renderers add to the dict they are given
        (as the command line renders once, nothing is lost there)."""
        return copy.deepcopy(dict(self._data))

    def _repr_html_(self) -> str:
        from qcdoctor.engine.api.display import framed
        return framed(self.to_html(), self.title or self.case_path)

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def __repr__(self) -> str:
        c = self.conclusion
        state = "determined" if c.determined else "not determined"
        kind = "audit" if self.audit else "triage"
        return (f"<qcdoctor {kind} report of {self.case_path!r}: {c.stage} ({state}), "
                f"{len(self.next_actions)} next action(s), {len(self.findings)} finding(s), "
                f"language {self.language}>")


def report_from(data: dict, *, audit: bool = False, origin: Origin | None = None) -> Report:
    """The Report of the JSON report ``data`` (kept as it is: not copied)."""
    case = data.get("case") or {}
    report = Report(
        language=data["language"], case_path=case.get("path", ""),
        title=case.get("title") or "", audit=audit,
        conclusion=_record(Conclusion, data["conclusion"], evidence=_each(Evidence)),
        missing=_each(MissingItem)(data.get("missing")),
        next_actions=_each(NextAction)(data.get("next_actions")),
        consistency=_record(Consistency, data["consistency"])
        if data.get("consistency") else None,
        findings=_each(Finding)(data.get("findings")),
        checklist=_each(ChecklistItem, parts=_each(ChecklistPart))(data.get("checklist")),
        pitfalls=_each(Pitfall)(data.get("pitfalls")),
        cautions=_each(Pitfall)(data.get("cautions")),
        keep=_each(KeptArtifact)((data.get("artifacts") or {}).get("keep")))
    object.__setattr__(report, "_data", data)       # frozen: set here, never changed
    object.__setattr__(report, "_origin", origin)
    return report
