"""``qcdoctor completion bash|zsh``: the shell completion script, read from the whole
command line (every command with its options)."""

from __future__ import annotations

import sys

from qcdoctor.errors import EXIT_OK

ABOUT = dict(help="print the shell completion script")
# the parser this command is given declares every command, not only this one
NEEDS_EVERY_COMMAND = True


def declare(command) -> None:
    command.add_argument("shell", choices=("bash", "zsh"))


def run(args, parser) -> int:
    import shtab
    sys.stdout.write(shtab.complete(parser, shell=args.shell))
    return EXIT_OK
