"""``qcdoctor triage CASE``: the conclusion report of a case (several cases: a batch)."""

from __future__ import annotations

from qcdoctor.engine.commands.options import case_command_options

ABOUT = dict(help="diagnose a case folder and print the conclusion report")


def declare(command) -> None:
    case_command_options(command, "triage")


def run(args, parser) -> int:
    from qcdoctor.engine.commands.case_report import diagnose_and_emit
    return diagnose_and_emit(args, audit=False)
