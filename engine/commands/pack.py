"""``qcdoctor pack CASE -o bundle.tar.gz``: a support bundle of a case, and what was left out."""

from __future__ import annotations

import sys
from pathlib import Path

from qcdoctor.engine.commands.options import FOLDERS, NO_ENV_HELP, complete
from qcdoctor.errors import EXIT_OK, QcdoctorError

ABOUT = dict(help="a support bundle: report, case.yaml, the files read and the artifacts to "
                  "keep, with a manifest")


def _size(text: str) -> int:
    from qcdoctor.engine.commands.support_bundle import parse_size
    return parse_size(text)


def declare(command) -> None:
    complete(command.add_argument("case", help="case folder (with case.yaml) or a case.yaml"),
             FOLDERS)
    command.add_argument("-o", "--output", metavar="BUNDLE", required=True,
                         help="the .tar.gz to write (never over an existing file)")
    command.add_argument("--max-file-size", metavar="SIZE", type=_size, default="200M",
                         help="larger files are listed in the manifest as left out "
                              "(default 200M)")
    command.add_argument("--lang", choices=("zh", "en"),
                         help="language of the bundle's report and of what is printed (default: "
                              "the case's, else the locale's)")
    command.add_argument("--trust-pickles", action="store_true",
                         help="allow .pt files that need full unpickling")
    command.add_argument("--no-env", action="store_true", help=NO_ENV_HELP)


def run(args, parser) -> int:
    from qcdoctor.engine.commands.support_bundle import pack_case
    from qcdoctor.wording import labels
    output = Path(args.output)
    manifest = pack_case(args.case, output, max_file_size=args.max_file_size, lang=args.lang,
                         use_env=not args.no_env, trust_pickles=args.trust_pickles)
    words = labels()[manifest["language"]]["pack"]
    out = sys.stderr if _into_stdout(output) else sys.stdout    # the bundle keeps stdout
    print(words["written"].format(path=output, files=len(manifest["files"]),
                                  size=sum(f["size"] for f in manifest["files"])), file=out)
    for entry in manifest["left_out"]:
        print(words["left_out"].format(path=entry["path"], reason=entry["reason"]), file=out)
    return EXIT_OK


def _into_stdout(output: Path) -> bool:
    from qcdoctor.engine.commands.output_file import output_target
    try:
        return output_target(output).fd == 1
    except QcdoctorError:
        return False
