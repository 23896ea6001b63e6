"""``qcdoctor audit CASE``: the deployment checklist of a case, every item shown."""

from __future__ import annotations

from qcdoctor.engine.commands.options import case_command_options

ABOUT = dict(help="the deployment checklist of a case, item by item")


def declare(command) -> None:
    case_command_options(command, "audit")


def run(args, parser) -> int:
    from qcdoctor.engine.commands.case_report import diagnose_and_emit
    return diagnose_and_emit(args, audit=True)
