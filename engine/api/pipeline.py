"""A case read, then diagnosed as the command line diagnoses it: its facts collected in
this process, the rules matched in the engine worker, the report built by ``triage_case``;
kept so that the report can be made in the other language from the same facts."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from qcdoctor.engine.api.errors import CaseError
from qcdoctor.engine.api.interrupts import HeldInterrupts
from qcdoctor.engine.api.report import Origin, Report
from qcdoctor.engine.api.values import given_path
from qcdoctor.errors import QcdoctorError

if TYPE_CHECKING:
    from qcdoctor.collectors.case import Case as ReadCase
    from qcdoctor.collectors.files import CaseFiles

PathLike = str | os.PathLike


def folders(given: Iterable[PathLike] | PathLike) -> tuple[Path, ...]:
    """``allow_outside`` as absolute paths: one folder, or several."""
    if isinstance(given, (str, bytes, os.PathLike)) or not isinstance(given, Iterable):
        given = [given]                 # one folder (or the one wrong value, named so)
    return tuple(absolute(given_path(p, "allow_outside")) for p in given)


def read_case(path: PathLike, allow_outside: tuple[Path, ...]) -> ReadCase:
    """The case at ``path`` read and validated, its folder and file absolute as they are
    now: a later change of the working directory (a notebook's %cd) changes neither what
    its report reads nor which files a save protects. A CaseError when it is not valid."""
    return read_named_case(path, allow_outside)[0]


def read_named_case(path: PathLike, allow_outside: tuple[Path, ...]) -> tuple[ReadCase, str]:
    """``read_case``, and the case folder as the user named it (relative when ``path``
    is), which the report shows as the command line does."""
    import dataclasses

    from qcdoctor.collectors.case_file import load_case
    try:
        case = load_case(os.fspath(given_path(path, "path")), allow_outside)
    except QcdoctorError as exc:
        raise CaseError.of(exc) from None
    return dataclasses.replace(case, folder=absolute(case.folder),
                               file=absolute(case.file)), str(case.folder)


def absolute(path: Path) -> Path:
    """``path`` joined to the working directory, as it is now (not resolved: a symlinked
    folder stays as named)."""
    try:
        return path.absolute()
    except OSError as exc:              # the working directory was removed meanwhile
        raise QcdoctorError(f"the working directory is gone ({exc.strerror})",
                            file=str(path), fix="change to a folder that exists (cd), "
                                                "or give an absolute path") from None


def diagnose(case: ReadCase, allow_outside: tuple[Path, ...], *, audit: bool,
             lang: str | None, trust_pickles: bool, use_env: bool, protected: list,
             display: str | None = None, lasting: bool = True,
             files: CaseFiles | None = None, thresholds: tuple | None = None) -> Report:
    """The report of a case read: its facts collected here, the rules matched in the
    engine worker (which compiles them meanwhile, the first time), the report built by
    ``triage_case`` as the command line builds it.

    The report in the other language is built from the same facts when asked for; when
    the case folder, with the files it lists, goes away after this call
    (``lasting=False``: an extracted bundle or example), it is built now. ``protected``:
    what a save must not replace, besides every file read. ``thresholds``: (values,
    sources) when already resolved.
    """
    from qcdoctor.collectors.case_facts import collect_case
    from qcdoctor.collectors.files import CaseFiles
    from qcdoctor.collectors.threshold_sources import resolve
    from qcdoctor.engine.diagnosis.triage import triage_case
    from qcdoctor.engine.matching.runner import bundled_runner
    with HeldInterrupts(forcible=True) as hold:    # a worker is started whole
        hold()
        bundled_runner().warm()     # a first triage's worker compiles while facts are read
    files = files or CaseFiles(case.folder, allow_outside)
    thresholds = thresholds or resolve(case, use_env)
    collected = collect_case(case, files=files, thresholds=thresholds[0],
                             trust_pickles=trust_pickles, use_env=use_env)

    def build(language: str | None) -> dict:
        # the engine worker is asked (and started, or replaced) in there: not stopped
        # half-way by a Ctrl-C, which waits until the report is built
        with HeldInterrupts(forcible=True) as hold:
            hold()
            return triage_case(case, lang=language, full_checklist=audit, case_files=files,
                               display_path=display, collected=collected,
                               thresholds_resolved=thresholds, use_env=use_env)
    origin = Origin(build, [p for p in protected if p is not None])
    report = origin.report(lang, audit)
    origin.protected += sorted(files.read)
    if not lasting:
        for other in ("zh", "en"):
            origin.report(other, audit)
    return report
