"""Rule documentation generated from the rule files: list, explain, full docs."""

from __future__ import annotations

import json

import yaml

from qcdoctor.engine.matching.rulebook import load_rules, rule_by_id
from qcdoctor.errors import QcdoctorError
from qcdoctor.templating import render_template


def list_rules(fmt: str = "md", lang: str = "en") -> str:
    rules = load_rules()
    if fmt == "json":
        return json.dumps([{"id": r.id, "group": r.group, "severity": r.severity,
                            "priority": r.priority, "title": r.title[lang],
                            "outputs": sorted(r.then)} for r in rules],
                          ensure_ascii=False, indent=2) + "\n"
    width = max(len(r.group) for r in rules)
    return "".join(f"{r.id}  {r.group.ljust(width)}  {r.severity:<7}  {r.title[lang]}\n"
                   for r in rules)


def rule_docs(lang: str = "en") -> str:
    """Every rule, grouped as in rules/, in one Markdown document (docs/rules.md: its
    references link to the pages beside it)."""
    from qcdoctor.vocabulary import GROUPS
    title = "qcdoctor 规则" if lang == "zh" else "qcdoctor rules"
    parts = [f"# {title}\n"]
    for group in GROUPS:
        rules = [r for r in load_rules() if r.group == group]
        if rules:
            parts.append(f"\n# {group}/ ({len(rules)})\n")
            parts += ["\n" + explain_rule(r.id, lang, linked=True) for r in rules]
    return "".join(parts)


def explain_rule(rule_id: str, lang: str = "en", *, linked: bool = False) -> str:
    rule = rule_by_id(rule_id)
    if rule is None:
        raise QcdoctorError(f"no rule {rule_id!r}", fix="see 'qcdoctor rules list' for the ids")
    dump = lambda value: yaml.safe_dump(value, allow_unicode=True, sort_keys=False,  # noqa: E731
                                        default_flow_style=None).strip()
    from qcdoctor.engine.reports.method_docs import describe
    # a message is a format template: its doubled braces are how it writes one brace
    unescaped = {key: getattr(rule, key)[lang].replace("{{", "{").replace("}}", "}")
                 for key in ("message", "rationale")}
    from qcdoctor.wording import labels
    return render_template("rule_doc.md.j2", rule=rule, lang=lang, texts=unescaped,
                           D=labels()[lang]["rule_doc"],
                           references=[describe(ref, linked=linked) for ref in rule.references],
                           when=dump(rule.raw["when"]), then=dump(rule.raw["then"]),
                           fires=len(rule.examples["fires"]), quiet=len(rule.examples["quiet"]))
