"""Options several commands declare alike: report formats, colours, folders outside the case,
batches, path completion, and what triage and audit share."""

from __future__ import annotations

import argparse

FAIL_ON = ("info", "warning", "error", "never")
# per-case report formats, and jsonl: one JSON report a line for a batch
REPORT_FORMATS = ("md", "html", "json", "sarif", "junit", "jsonl")
FORMAT_HELP = ("md (Markdown), html (one self-contained file with plots), json, sarif or "
               "junit (for CI), jsonl (a batch: one JSON report a line); by default a "
               "terminal gets a coloured view and anything else Markdown")
NO_ENV_HELP = ("ignore this machine (installed Horizon packages, board variables, a board "
               "file in the working directory): for a case folder received from someone else")

# what shell completion offers for a path argument (read by shtab, which is imported only
# by the completion command): these are its own completion functions
FILES = {"bash": "_shtab_compgen_files", "zsh": "_files"}
FOLDERS = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/"}


def complete(action: argparse.Action, paths: dict) -> argparse.Action:
    """``action`` completed as ``paths`` (FILES or FOLDERS) by the shell."""
    action.complete = paths
    return action


def color_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                         help="the terminal view's colours: auto (on a terminal, unless NO_COLOR "
                              "is set; FORCE_COLOR forces them), always (also through a pipe), "
                              "never")


def allow_outside_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--allow-outside", metavar="PATH", action="append", default=[],
                         help="also read artifacts in this folder outside the case folder "
                              "(repeatable; by default nothing outside the case is read)")


def batch_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("-r", "--recursive", action="store_true",
                         help="also triage every case folder below the folders given")
    command.add_argument("-j", "--jobs", type=int, metavar="N",
                         help="cases at a time in a batch, each in a worker process "
                              "(default: one per core; 1 runs in this process)")


# what triage and audit say differently about the options they share
_CASE_COMMAND_WORDS = {
    "triage": {"example": "diagnose", "output": "report",
               "lang": "report language (default: the case's, else the locale's; see "
                       "docs/reports.md, Language)",
               "fail_on": "", "pickles": ".pt files that need full unpickling (can run "
               "code: only for files you trust)"},
    "audit": {"example": "audit", "output": "audit", "lang": None,
              "fail_on": " (a failed checklist item counts as error)",
              "pickles": ".pt dumps that need full unpickling"},
}


def case_command_options(command: argparse.ArgumentParser, name: str) -> None:
    """The options of triage and audit: one case, a batch or a bundled example, rendered."""
    words = _CASE_COMMAND_WORDS[name]
    complete(command.add_argument("case", nargs="*", help="case folder (with case.yaml), a "
                                  "case.yaml or a support bundle; several make a batch"), FILES)
    command.add_argument("--example", metavar="NAME", help=f"{words['example']} a bundled "
                         "example case (as --no-env: this machine is not read)")
    command.add_argument("--format", choices=REPORT_FORMATS, help=FORMAT_HELP)
    command.add_argument("-o", "--output", metavar="FILE", help=f"write the {words['output']} "
                         "here (atomically); a folder with several cases")
    batch_options(command)
    color_option(command)
    command.add_argument("--lang", choices=("zh", "en"), help=words["lang"])
    command.add_argument("--fail-on", choices=FAIL_ON, default="never",
                         help="exit 1 when an item at or above this severity is reported"
                              + words["fail_on"])
    command.add_argument("--trust-pickles", action="store_true",
                         help=f"allow {words['pickles']}")
    command.add_argument("--no-env", action="store_true", help=NO_ENV_HELP)
    allow_outside_option(command)
