"""The terminal view of a report: rich renders it, word-wrapped to the terminal's width,
statuses coloured and always written out (colour is never the only sign).

Built from the Diagnosis like the Markdown and HTML reports. Case text reaches rich only
as ``Text`` (never as console markup, so ``[bold]`` in a layer name is shown as typed),
made visible first (common/safe_text.py: control characters and bidirectional controls
as U+FFFD), code included. The width is the terminal's, clamped (engine/reports/termtext.py).
"""

from __future__ import annotations

import io
import re

from qcdoctor.engine.reports.termtext import clamp_width, terminal_width
from qcdoctor.engine.reports.view import audit_view, failed_first, view_model
from qcdoctor.safe_text import visible
from qcdoctor.text import code_spans

STYLES = {"fail": "bold white on red", "abnormal": "bold white on red", "error": "bold red",
          "unknown": "bold black on yellow", "warning": "bold yellow",
          "pass": "bold white on green", "normal": "bold white on green", "info": "cyan",
          "not_applicable": "white on grey37"}
CODE = "bold cyan"
DIM = "dim"


def _shown(value) -> str:
    """One line, made visible (spaces at the ends kept)."""
    return visible(re.sub(r"\s+", " ", str(value)))


# a line rich measures as one cell too wide (a CJK character before a wrapped space) is
# folded onto the next line, never cut with an ellipsis: no character of a message is lost
_OVERFLOW = "fold"


def _text(value, style: str = ""):
    from rich.text import Text
    return Text(_shown(value), style=style, overflow=_OVERFLOW)


def _message(value, style: str = ""):
    """A rule message: its `code` spans highlighted, the rest as typed."""
    from rich.text import Text
    out = Text(style=style, overflow=_OVERFLOW)
    for part, code in code_spans(_shown(value)):
        out.append(part, style=CODE if code else "")
    return out


def _badge(state: str, words: str):
    return _text(f" {words} ", STYLES.get(state, ""))


def _line(*parts):
    from rich.text import Text
    out = Text(overflow=_OVERFLOW)
    for part in parts:
        out.append(part if isinstance(part, Text) else _text(part))
    return out


def _rule_id(rule: str):
    return _text(f" [{rule}]", DIM) if rule else _text("")


def _sources(view: dict, values: list[str]):
    return _text(f" ← {view['src'](values)}", DIM) if values else _text("")


def _code(code: str):
    from rich.syntax import Syntax
    lines = visible(code.rstrip("\n"))
    return Syntax(lines, "python", theme="ansi_dark", word_wrap=True, background_color="default")


def _bullets(items, numbered: bool = False):
    from rich.table import Table
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    for i, item in enumerate(items, 1):
        grid.add_row(_text(f"{i}." if numbered else "•"), item)
    return grid


def _conclusion(view: dict, evidence: list[dict]):
    from rich.console import Group
    from rich.panel import Panel
    r, L, sep = view["r"], view["L"], view["sep"]
    determined = r["conclusion"]["determined"]
    head = _line(_text(f"{L['stage']}{sep}"), _text(view["stage_label"], "bold"), _text(" "),
                 _badge("pass" if determined else "unknown",
                        L["determined_yes"] if determined else L["determined_no"]))
    parts = [head]
    if r["conclusion"]["suspect"]:
        parts.append(_line(_text(f"{L['suspect']}{sep}"), _message(view["suspect_text"])))
    parts.append(_text(f"{L['evidence']}{sep}".rstrip()))
    parts.append(_bullets([_line(_message(e["text"]), _rule_id(e["rule"]),
                                 _sources(view, e.get("sources", [])))
                           for e in evidence if not e.get("overridden")]))
    return Panel(Group(*parts), title=_text(L["summary"], "bold"), title_align="left",
                 border_style="green" if determined else "yellow")


def _checklist(view: dict):
    from rich.table import Table
    L, sep = view["L"], view["sep"]
    table = Table(show_lines=True, expand=True)
    table.add_column(L["col_item"], ratio=2)
    table.add_column(L["col_status"], no_wrap=True)
    table.add_column(L["evidence"], ratio=5)
    for c in failed_first(view["r"]["checklist"]):
        lines = [_line(_message(e["text"]), _rule_id(e["rule"]), _sources(view, e["sources"]))
                 for e in c["evidence"]]
        lines += [_line(_text(f"{L['rolled_up']}{sep}"), _text(p["title"]), _text(" "),
                        _badge(p["status"], L["checklist_status"][p["status"]]))
                  for p in c.get("parts", [])]
        if c.get("provide"):
            lines.append(_line(_text(f"{L['provide']}{sep}"), _message(c["provide"])))
        from rich.console import Group
        table.add_row(_text(c["title"] + (" *" if c["mandatory"] else ""),
                            "bold" if c["status"] == "fail" else ""),
                      _badge(c["status"], L["checklist_status"][c["status"]]), Group(*lines))
    return table


def _heading(text: str):
    from rich.rule import Rule
    return Rule(_text(text, "bold"), align="left", style="blue")


def _finding(view: dict, f: dict):
    L, sep = view["L"], view["sep"]
    return _line(_badge(f["severity"], L["severity"][f["severity"]]), _text(" "),
                 _message(f["title"], "bold"), _rule_id(f["rule"]), _text(sep), _message(f["text"]))


def _needed_line(view: dict, item: dict):
    """One thing the report waits for from the user (``view._needed``)."""
    L, sep = view["L"], view["sep"]
    why = [_text(f"{L['open']}{L['why']}{sep}"), _message(item["why"]), _text(L["close"])] \
        if item["why"] else []
    return _line(_message(item["text"]), *why, _rule_id(item["rule"]))


def _consistency_text(view: dict):
    """The strategy's paragraph, or where it already stands: the smallest action shown first,
    or a further step by its number."""
    return _message(view["consistency_pointer"] or view["r"]["consistency"]["text"])


def _fix_trials(view: dict) -> list:
    """The remedies qcdoctor probe measured, per fix_trials.yaml: what the Markdown and
    HTML reports show in their section of that name (nothing without one)."""
    from rich.table import Table
    L, sep = view["L"], view["sep"]
    F = L["fixes"]
    parts = [_text(F["title"], "bold")] if view["fix_trials"] else []
    for f in view["fix_trials"]:
        parts.append(_message(f["head"]))
        if f["rows"]:
            table = Table(expand=True)
            for title, ratio in ((F["col_fix"], 2), (F["col_layers"], 4), (f["col_after"], 1),
                                 (F["col_removed"], 1), (F["col_forwards"], 1)):
                table.add_column(title, ratio=ratio)
            for t in f["rows"]:
                fix = _line(_text(t["fix"] + " "), _badge("pass", F["reaches"])) \
                    if t["reaches"] else _text(t["fix"])
                table.add_row(fix, _text(t["layers"], CODE), _text(t["after"]),
                              _text(t["removed"]), _text(t["forwards"]))
            parts.append(table)
            if f["more"]:
                parts.append(_text(f["more"], DIM))
        else:
            parts.append(_text(f["empty"]))
        lines = [_message(f["greedy"])]
        lines += [_line(_text(f"{F['notes']}{sep}"), _text(n)) for n in f["notes"]]
        if f["caveats"]:
            lines.append(_text(f"{F['caveats']}{sep}{L['semicolon'].join(f['caveats'])}"))
        parts.append(_bullets(lines))
    return parts


# below this many columns the six columns of the stage table cannot show their words: each
# stage is a bullet of its own instead
WIDE_TABLE = 80


def _stage_table(view: dict):
    from rich.cells import cell_len
    from rich.table import Table
    L = view["L"]
    table = Table(expand=True)
    for key, ratio in (("col_stage", 2), ("col_status", 0), ("col_metric", 1),
                       ("col_value", 1), ("col_basis", 4), ("col_source", 3)):
        # a header is never cut: its column is at least as wide as its words
        table.add_column(L[key], ratio=ratio or None, no_wrap=not ratio,
                         min_width=cell_len(L[key]))
    for s in view["stage_rows"]:
        table.add_row(_text(s["label"]), _badge(s["state"], s["status"]), _text(s["metric"]),
                      _text(s["value"]), _message(s["note"]), _text(s["source"], DIM))
    return table


def _stage_list(view: dict):
    """The stage table as bullets, for a narrow terminal."""
    sep = view["sep"]
    rows = []
    for s in view["stage_rows"]:
        measured = f" {s['metric']} {s['value']}".rstrip() if s["value"] != "" else ""
        rows.append(_line(_text(s["label"], "bold"), _text(" "),
                          _badge(s["state"], s["status"]), _text(measured),
                          _text(sep) if s["note"] else _text(""), _message(s["note"]),
                          _text(f" ← {s['source']}", DIM) if s["source"] else _text("")))
    return _bullets(rows)


def _triage_parts(view: dict) -> list:
    r, L, sep = view["r"], view["L"], view["sep"]
    # what the layer reading located leads, before the stage (which it may leave open)
    parts = [_message(line, "bold") for line in view["located"]]
    parts.append(_conclusion(view, r["conclusion"]["evidence"]))
    actions = r["next_actions"]
    if actions:
        parts += [_text(L["view"]["smallest_action"], "bold"),
                  _line(_message(actions[0]["text"]), _rule_id(actions[0]["rule"]))]
        if actions[0].get("code"):
            parts.append(_code(actions[0]["code"]))
    parts += [_heading(L["facts"]), _bullets(
        [_text(f"{L['normal']}{sep}{view['normal'] or '—'}"),
         _text(f"{L['abnormal']}{sep}{view['abnormal'] or '—'}"),
         _line(_text(f"{L['platform']}{sep}"), _message(view["platform_text"])),
         _line(_text(f"{L['badcase']}{sep}"), _message(view["badcase"])),
         _line(_text(f"{L['evidence_kinds']}{sep}"), _message(view["evidence_kinds"])),
         *[_message(d) for d in view["directions"]]])]
    if view["stage_rows"]:
        parts.append(_stage_table(view) if view["width"] >= WIDE_TABLE else _stage_list(view))
    parts += [_heading(L["checks"]),
              _bullets([_text(c) for c in view["checks"]], numbered=True)
              if view["checks"] else _text(L["no_checks"])]
    findings = [_finding(view, f) for f in r["findings"]]
    if view["qa_folders"]:
        for q in view["qa_folders"]:
            findings.append(_line(_text(f"{L['qa_summary']}{sep}"), _text(q["name"], CODE),
                                  _text(f"{L['open']}{q['comparison']}{L['semicolon']}"
                                        f"{q['known_from']}{L['close']}")))
            findings += [_line(_text("  – "), _message(line)) for line in q["lines"]]
        findings.append(_line(_text(f"{L['thresholds']}{sep}"), _text(view["thresholds"], DIM)))
    else:
        findings.append(_text(f"{L['qa_summary']}{sep}{view['qa_summary']}"))
    findings.append(_line(_text(f"{L['fixes_applied']}{sep}"), _message(view["fixes_applied"])))
    parts += [_heading(L["findings"]), _bullets(findings)]
    parts += _fix_trials(view)
    for title, items in ((L["pitfalls"], r["pitfalls"]), (L["cautions"], r.get("cautions", []))):
        if items:
            parts += [_text(title, "bold"), _bullets(
                [_line(_text(view["words"](p["id"]), "bold"), _text(sep), _message(p["text"]), _text(" "),
                       _text(f"{L['correct_practice']}{sep}", "italic"),
                       _message(p["correct_practice"]), _rule_id(p["rule"])) for p in items])]
    if r["checklist"]:
        parts += [_text(L["checklist"], "bold"), _checklist(view)]
    if len(actions) > 1:        # the first is shown above, as the smallest action
        parts.append(_heading(L["more_actions"]))
    for i, a in enumerate(actions[1:], 2):
        parts.append(_line(_text(f"{i}. ", "bold"), _message(a["text"]), _rule_id(a["rule"])))
        if a.get("code"):
            parts.append(_code(a["code"]))
    if r["consistency"]:
        parts += [_text(L["consistency"], "bold"), _bullets(
            [_message(view["consistency_line"]),
             _line(_consistency_text(view), _rule_id(r["consistency"]["rule"]))])]
    parts.append(_text(L["needed"], "bold"))
    parts.append(_bullets([_needed_line(view, m) for m in view["needed"]])
                 if view["needed"] else _text(L["nothing_needed"]))
    keep = [_line(_message(k["name"]), _text(sep),
                  _badge("pass", L["present"]) if k["present"] else _badge("unknown", L["absent"]),
                  _text(f" {k['path']}", CODE) if k["present"] else _text(""))
            for k in r["artifacts"]["keep"]]
    parts += [_heading(L["keep"]), _bullets(keep) if keep else _text(L["keep_none"]),
              _text(f"{L['rules']}{sep}{', '.join(view['rules_fired'])}", DIM)]
    return parts


def _audit_parts(view: dict) -> list:
    r, L, sep = view["r"], view["L"], view["sep"]
    audit = audit_view(r)
    parts = [_conclusion(view, r["conclusion"]["evidence"][:1]),
             _text(audit["audit_summary"], "bold"), _checklist(view)]
    if audit["deploy_findings"]:
        parts += [_heading(L["findings"]),
                  _bullets([_finding(view, f) for f in audit["deploy_findings"]])]
    unknown = audit["unknown_items"]
    if unknown:
        parts += [_heading(L["needed"]), _bullets(
            [_line(_text(f"{c['title']}{sep}"), _message(c["provide"])) for c in unknown])]
    return parts


def render_terminal(report: dict, *, audit: bool = False, color: bool = True,
                    width: int | None = None) -> str:
    """The report as the terminal shows it: ANSI styles when ``color``, else plain text;
    ``width`` (by default the terminal's) is clamped to what a terminal can show."""
    from rich.console import Console, Group
    width = terminal_width() if width is None else clamp_width(width)
    view = view_model(report)
    view["width"] = width
    L = view["L"]
    title = L["audit_title"] if audit else L["title"]
    if report["case"].get("title"):
        title += view["sep"] + report["case"]["title"]
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system="standard" if color else None,
                      force_terminal=color, no_color=not color, highlight=False,
                      emoji=False, markup=False, legacy_windows=False)
    header = [_text(title, "bold"),
              _text(f"{L['case']}{view['sep']}{report['case']['path']} · qcdoctor "
                    f"{report['tool']['version']}", DIM)]
    console.print(Group(*header, *(_audit_parts(view) if audit else _triage_parts(view))))
    return buffer.getvalue()
