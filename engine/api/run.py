"""``qcdoctor.triage`` and ``qcdoctor.audit``: a case folder, a case.yaml, a support bundle
or a bundled example diagnosed by the functions the command line runs (read the case,
collect its facts, match the rules in the engine worker, build the report), in this
process. Many triages share one engine worker; one interrupted (Ctrl-C, a notebook's
interrupt) leaves it to be replaced, and the next triage works as the first did.

>>> import qcdoctor
>>> qcdoctor.triage(example="board_only", lang="en").conclusion.stage
'user_side'
>>> qcdoctor.audit(example="board_nv12_deploy", lang="en").checklist[0].status
'fail'
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from qcdoctor.engine.api.interrupts import entered_whole
from qcdoctor.engine.api.pipeline import (
    PathLike,
    absolute,
    diagnose,
    folders,
    read_case,
    read_named_case,
)
from qcdoctor.engine.api.report import Report, checked_language
from qcdoctor.engine.api.values import given_path
from qcdoctor.errors import QcdoctorError

if TYPE_CHECKING:
    from qcdoctor.engine.api.case import Case


def triage(path: PathLike | Case | None = None, *, example: str | None = None,
           lang: str | None = None, trust_pickles: bool = False, use_env: bool = True,
           allow_outside: Iterable[PathLike] | PathLike = ()) -> Report:
    """The conclusion report of a case, as ``qcdoctor triage`` gives it.

    ``path``: a case folder (holding case.yaml), a case.yaml, a support bundle
    (``.tar.gz``) or a ``qcdoctor.Case``; or ``example=``, a bundled example by name
    (``list_examples()``), read as someone else's case: this machine is not read.
    ``lang``: ``zh`` or ``en`` (default: the case's ``language``, else zh).
    ``trust_pickles``: also read ``.pt`` files that need full unpickling (this can run
    code: only for files you trust). ``use_env=False``: ignore this machine (installed
    Horizon packages, board variables, board files in the working directory).
    ``allow_outside``: folders outside the case whose artifacts may be read.

    A case that is not valid raises ``CaseError`` (file, line, key, problem, fix); any
    other bad input a ``QcdoctorError``.
    """
    return _diagnose(path, example, audit=False, lang=lang, trust_pickles=trust_pickles,
                     use_env=use_env, allow_outside=allow_outside)


def audit(path: PathLike | Case | None = None, *, example: str | None = None,
          lang: str | None = None, trust_pickles: bool = False, use_env: bool = True,
          allow_outside: Iterable[PathLike] | PathLike = ()) -> Report:
    """The deployment checklist audit of a case, as ``qcdoctor audit`` gives it: every
    checklist item judged (``Report.checklist``); the arguments as ``triage``'s."""
    return _diagnose(path, example, audit=True, lang=lang, trust_pickles=trust_pickles,
                     use_env=use_env, allow_outside=allow_outside)


def list_examples() -> dict[str, str]:
    """The bundled example cases: name -> title.

    >>> "convert_j6e_no_retrain" in list_examples()
    True
    """
    from qcdoctor.engine.commands.examples import example_names, example_title
    return {name: example_title(name) for name in example_names()}


def _diagnose(path, example, *, audit: bool, lang, trust_pickles: bool, use_env: bool,
              allow_outside) -> Report:
    lang = checked_language(lang)
    allowed = folders(allow_outside)
    options = dict(audit=audit, lang=lang, trust_pickles=trust_pickles)
    if (path is None) == (example is None):
        raise QcdoctorError("give either a case (a folder, a case.yaml, a bundle or a Case) "
                            "or example=NAME", fix="qcdoctor.triage('my_case'), or "
                                                   "qcdoctor.triage(example='board_only'); "
                                                   "qcdoctor.list_examples() lists them")
    from qcdoctor.engine.api.case import Case
    if isinstance(path, Case):
        return path.diagnose(use_env=use_env, allow_outside=allowed, **options)
    if example is not None:
        return _example(example, **options)
    given = given_path(path, "path")
    named = os.fspath(path)             # as the command line names it: ./case.tar.gz stays so
    from qcdoctor.collectors.bundle import is_bundle
    if is_bundle(given):
        bundle = absolute(given)        # protected by where it is now, whatever %cd follows
        from qcdoctor.collectors.bundle import opened_bundle
        with entered_whole(lambda: opened_bundle(bundle)) as folder:
            try:
                # the folder goes with the block: the report is made in both languages now
                return diagnose(read_case(folder, allowed), allowed, display=named,
                                use_env=use_env, protected=[bundle], lasting=False,
                                **options)
            except QcdoctorError as exc:     # named as the bundle's member, not a temp file
                raise exc.inside_bundle(folder, named) from None
    case, shown = read_named_case(given, allowed)
    return diagnose(case, allowed, use_env=use_env, display=shown,
                    protected=[case.folder, case.file], **options)


def _example(name: str, **options) -> Report:
    from qcdoctor.engine.commands.examples import example_names, example_path
    from qcdoctor.package_data import package_files
    names = example_names()
    if not isinstance(name, str) or name not in names:
        from qcdoctor.engine.api.values import shown
        from qcdoctor.suggest import did_you_mean
        near = did_you_mean(name, names) if isinstance(name, str) else ""
        raise QcdoctorError(f"no example named {shown(name)}{near}",
                            key="example", fix=f"choose one of: {', '.join(names)}")
    # a zipped install extracts the example for the time of the block only
    lasting = isinstance(package_files("qcdoctor.examples"), Path)
    with entered_whole(lambda: example_path(name)) as folder:
        # an example is someone else's case: this machine is not read
        return diagnose(read_case(folder, ()), (), display=f"example:{name}", use_env=False,
                        protected=[], lasting=lasting, **options)
