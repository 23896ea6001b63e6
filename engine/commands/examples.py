"""``qcdoctor examples``: the example cases bundled with qcdoctor (examples/<name>/case.yaml),
listed, copied to start a case from, or opened for a triage."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from qcdoctor.errors import EXIT_OK, QcdoctorError
from qcdoctor.package_data import package_files

ABOUT = dict(help="list the bundled example cases, or copy one")


def declare(command) -> None:
    command.add_argument("--copy", nargs=2, metavar=("NAME", "DIR"),
                         help="copy the example NAME into DIR (new or empty) to start a case "
                              "from")
    command.add_argument("--lang", choices=("zh", "en"),
                         help="language of the list's heading (default: the locale's; see "
                              "docs/reports.md, Language); each title is in its case's language")


def run(args, parser) -> int:
    if args.copy:
        copy_example(*args.copy)
        return EXIT_OK
    from qcdoctor.engine.reports.locale_language import chosen_language
    from qcdoctor.wording import labels
    names = example_names()
    width = max(map(len, names), default=0)
    print(labels()[chosen_language(args.lang)]["examples"]["heading"])
    for name in names:
        case = _case_data(name)
        print(f"  {name.ljust(width)}  {case.get('language', '')}  {case.get('title', '')}")
    return EXIT_OK


def _root():
    return package_files("qcdoctor.examples")


def example_names() -> list[str]:
    return sorted(p.name for p in _root().iterdir()
                  if p.is_dir() and (p / "case.yaml").is_file())


def example_title(name: str) -> str:
    return str(_case_data(name).get("title", ""))


def _case_data(name: str) -> dict:
    """The example's case.yaml as read, without checking it (to list it)."""
    from qcdoctor.package_data import safe_yaml
    return safe_yaml((_root() / name / "case.yaml").read_text(encoding="utf-8")) or {}


@contextmanager
def example_path(name: str):
    """A real folder for the example (extracted if the package is zipped)."""
    if name not in example_names():
        raise QcdoctorError(f"no example named {name!r}",
                            fix=f"choose one of: {', '.join(example_names())}")
    root = _root()
    if isinstance(root, Path):
        yield root / name
        return
    from importlib import resources
    with resources.as_file(root / name) as path:
        yield Path(path)


def copy_example(name: str, folder: str) -> Path:
    """The example copied into ``folder`` (new, or an empty folder): a case to start from.
    It is copied beside ``folder`` first and renamed into place once whole, so a failed
    copy (a full disk, Ctrl-C) leaves no half case that the next ``--copy`` would refuse."""
    from qcdoctor.atomic import folder_made_atomically
    from qcdoctor.collectors.files import check_path_length
    from qcdoctor.engine.commands.output_file import make_folder
    check_path_length(folder)
    target = Path(folder)
    _check_free(target, name)
    with example_path(name) as source:
        make_folder(target.parent)
        try:            # a link to an empty folder: filled where it leads, the link kept
            with folder_made_atomically(os.path.realpath(target)) as staging:
                _copy_files(source, staging)
        except OSError as exc:
            raise _copy_failed(exc, folder) from None
    return target


def _check_free(target: Path, name: str) -> None:
    """``target`` is absent or an empty folder: nothing is copied over the user's files."""
    try:
        if not target.is_dir():
            if os.path.lexists(target):
                raise QcdoctorError("not a folder", file=str(target),
                                    fix="give a new folder to copy into")
            return
        full = any(target.iterdir())
    except OSError as exc:
        raise _copy_failed(exc, str(target)) from None
    if full:
        raise QcdoctorError("this folder is not empty: nothing is copied over your files",
                            file=str(target), fix=f"give a new folder, e.g. {target / name}")


def _copy_failed(exc: OSError, folder: str) -> QcdoctorError:
    from qcdoctor.engine.commands.output_file import explained
    return explained(exc, folder, doing="copy the example", elsewhere="copy it into another "
                     "folder", note="nothing was copied there")


def _copy_files(source: Path, into: Path) -> None:
    """``source``'s files and folders into the folder ``into``, stopping at the first
    failure with its reason (shutil.copytree gathers them all into one shutil.Error of
    strings, the reason lost)."""
    import shutil
    for entry in sorted(source.iterdir()):
        if entry.name == "__pycache__":
            continue
        if entry.is_dir():
            (into / entry.name).mkdir()
            _copy_files(entry, into / entry.name)
        else:
            shutil.copy2(entry, into / entry.name)
