"""A case built in Python: the keys of case.yaml given as arguments, checked by the case
file's own reader, triaged without a file, and saved as a case.yaml that triages the same.

The arguments are case.yaml's keys (docs/case-file.md), with three conveniences:
``chip`` and ``march`` stand for ``platform: {chip, march}``; a stage's result may be
a number (its value, with the case's ``metric``) or a status word; and ``folder`` says
where the artifacts the case names (QuantAnalysis outputs, scripts, dumps) are.

>>> import qcdoctor
>>> case = qcdoctor.Case(chip="J6E", metric="mAP", evidence=["dataset_eval"],
...                      stages={"qat": 0.449, "qat_bc": 0.447, "quantized_bc": 0.391})
>>> case.triage(lang="en", use_env=False).conclusion.stage
'convert'
>>> case.stage("board", 0.30).data["stages"]["board"]
{'metric': 'mAP', 'value': 0.3}
>>> qcdoctor.Case(chip="J6-E")
Traceback (most recent call last):
  ...
qcdoctor.engine.api.errors.CaseError: 'platform.chip': 'J6-E' is not allowed
  fix: did you mean 'J6E'? use one of: J6E | J6M | J6P | J6H | J6B | S100 | S100P | S600
"""

from __future__ import annotations

import copy
import numbers
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qcdoctor.engine.api.errors import CaseError
from qcdoctor.engine.api.interrupts import entered_whole
from qcdoctor.engine.api.pipeline import (
    PathLike,
    absolute,
    diagnose,
    folders,
    read_case,
)
from qcdoctor.engine.api.report import Report, checked_language
from qcdoctor.engine.api.values import given_path, plain_data, shown
from qcdoctor.errors import QcdoctorError
from qcdoctor.fact_types import STAGES

if TYPE_CHECKING:
    from qcdoctor.collectors.case import Case as ReadCase

StageResult = float | str | Mapping[str, Any]

# the header of a saved case.yaml (part of the text the case is read from, so line
# numbers in the report are the saved file's)
HEADER = ("# qcdoctor case file (schema qcdoctor/case-v1): every key is described in\n"
          "# docs/case-file.md; `qcdoctor triage FOLDER` reads it.\n")
# how the report names a case built in Python and not saved (it has no folder)
_BUILT_IN_PYTHON = "qcdoctor.Case(...)"
# arguments that are no key of case.yaml, or stand for a part of one
_NOT_KEYS = ("chip", "march", "metric", "folder")


class Case:
    """A case given as values rather than a case.yaml.

    Every argument is optional and named as the case.yaml key it sets (see
    docs/case-file.md); ``None`` leaves a key out. Beside those: ``chip`` / ``march``
    (``platform.chip`` / ``platform.march``), ``metric`` (the metric name of the stage
    results given as bare numbers) and ``folder`` (where the case's artifacts are; by
    default none: the case is read as a case.yaml alone in a folder). ``stages`` maps a
    stage id (float, calib, qat, qat_export, qat_bc, quantized_bc, nv12_bc,
    qdq_removed_bc, hbm_x86, board) to a number, a status (normal, abnormal, unknown) or
    a mapping ``{metric, value, status}``.

    Values are checked as case.yaml is: a wrong key, stage id, value or type raises
    ``CaseError`` naming the key (``stages.qatt``), the problem and the fix.
    """

    def __init__(self, *, title: str | None = None, language: str | None = None,
                 symptom: str | None = None, evidence: str | Iterable[str] | None = None,
                 badcase: str | None = None, chip: str | None = None,
                 march: str | None = None, platform: Mapping[str, str] | None = None,
                 versions: Mapping[str, str] | None = None, metric: str | None = None,
                 stages: Mapping[str, StageResult | None] | None = None,
                 tolerance: Mapping[str, float] | None = None,
                 higher_is_better: bool | None = None, retrain: str | bool | None = None,
                 consistency_level: int | None = None,
                 consistency_levels_tried: Iterable[int] | None = None,
                 consistency_numbering: str | None = None,
                 fake_quant_state: str | None = None, input_format_differs: bool | None = None,
                 has_task_input: bool | None = None,
                 postprocess_in_model: str | bool | None = None,
                 analyses_run: Iterable[Mapping[str, Any]] | None = None,
                 user_checks: Mapping[str, str | bool] | None = None,
                 deploy: Mapping[str, Any] | None = None,
                 thresholds: Mapping[str, float] | None = None,
                 artifacts: Mapping[str, Any] | None = None,
                 folder: PathLike | None = None):
        given = {k: v for k, v in locals().items() if k not in ("self", "__class__")}
        self._folder = given_path(folder, "folder") if folder is not None else None
        self._metric: str | None = None
        self._document: dict = {}
        self._read: ReadCase        # set by update, through _replace
        self.update(**{k: v for k, v in given.items() if k != "folder"})

    @classmethod
    def load(cls, path: PathLike) -> Case:
        """The case of a case folder or case.yaml, to change and save or triage; its
        folder is the file's, made absolute (its comments are not kept)."""
        read = read_case(path, ())
        case = cls(folder=read.folder)
        case._replace(copy.deepcopy(read.data))
        return case

    # -- building ------------------------------------------------------------------

    def update(self, **values: Any) -> Case:
        """Set case keys by the constructor's argument names (None leaves a key as it
        is); checked as a whole, so a CaseError leaves the case unchanged. Returns the
        case."""
        from qcdoctor.suggest import did_you_mean
        known = _arguments()
        for name in values:
            if name not in known:
                raise CaseError(f"no case key or argument {name!r}"
                                f"{did_you_mean(name, known)}", key=name,
                                fix="use the keys of docs/case-file.md: "
                                    + ", ".join(k for k in known if k != "folder"))
        given = {name: _plain(value, name) for name, value in values.items()
                 if value is not None}
        document = copy.deepcopy(self._document)
        metric = _metric(given.get("metric", self._metric))
        # platform first: chip= and march= then add to it, or contradict it
        for name, value in sorted(given.items(), key=lambda item: item[0] != "platform"):
            if name == "metric":
                continue
            if name in ("chip", "march"):
                platform = document.setdefault("platform", {})
                named = given.get("platform", {})
                if name in named and named[name] != value:
                    raise CaseError(f"given twice: {name}={shown(value)} and platform="
                                    f"{{{name!r}: {shown(named[name])}}}",
                                    key=f"platform.{name}", fix=f"give the {name} once")
                platform[name] = value
            elif name == "stages":
                if not isinstance(value, dict):
                    raise CaseError("expected a mapping of stage ids to results",
                                    key="stages", fix="stages={'qat_bc': 0.449, "
                                                      "'quantized_bc': 0.391}")
                for stage, result in value.items():
                    entry = _stage_entry(stage, result, metric)
                    if entry is not None:
                        document.setdefault("stages", {})[stage] = entry
            elif name == "platform":
                document["platform"] = {**document.get("platform", {}),
                                        **_mapping(value, "platform")}
            else:
                document[name] = value
        self._replace(document)
        self._metric = metric
        return self

    def stage(self, stage: str, value: float | None = None, *, metric: str | None = None,
              status: str | None = None) -> Case:
        """Give (or replace) the result of ``stage``: its metric ``value`` (with
        ``metric``, by default the case's), or its ``status`` (normal, abnormal,
        unknown). Returns the case, so calls chain.

        >>> Case(metric="mAP").stage("qat_bc", 0.449).stage("hbm_x86", status="abnormal").data["stages"]
        {'qat_bc': {'metric': 'mAP', 'value': 0.449}, 'hbm_x86': {'status': 'abnormal'}}
        """
        stage = _stage_id(stage)
        if value is None and status is None:
            raise CaseError("give the stage's value or its status", key=f"stages.{stage}",
                            fix=f"case.stage({stage!r}, 0.449) or "
                                f"case.stage({stage!r}, status='abnormal')")
        metric = _metric(_plain(metric, "metric"))
        entry = {"metric": metric or (self._metric if value is not None else None),
                 "value": value, "status": status}
        document = copy.deepcopy(self._document)
        document.setdefault("stages", {})[stage] = _plain(
            {k: v for k, v in entry.items() if v is not None}, f"stages.{stage}")
        self._replace(document)
        return self

    def add_quant_analysis(self, out_dir: PathLike, *, baseline: str, analysis: str,
                           type: str | None = None, sensitivity: bool | None = None,
                           separate_runs: bool | None = None,
                           origin: str | None = None) -> Case:
        """Record a QuantAnalysis run (an ``analyses_run`` entry): the stages compared
        (``baseline``, ``analysis``), the folder it wrote (``out_dir``, relative to the
        case's folder), its ``type`` (analysis_model_type; by default from the stages),
        whether ``sensitivity`` ran, whether the two models ran ``separate_runs``, and
        ``origin`` (profiler, or probe for a folder written by ``qcdoctor.probe``).
        Returns the case."""
        entry = {"type": type, "baseline": baseline, "analysis": analysis,
                 "out_dir": out_dir, "sensitivity": sensitivity,
                 "separate_runs": separate_runs, "origin": origin}
        document = copy.deepcopy(self._document)
        runs = document.setdefault("analyses_run", [])
        runs.append(_plain({k: v for k, v in entry.items() if v is not None},
                           f"analyses_run[{len(runs)}]"))
        self._replace(document)
        return self

    def _replace(self, document: dict) -> None:
        """Take ``document`` if the case file's reader accepts its text."""
        from qcdoctor.collectors.case_file import parse_case
        try:
            read = parse_case(_text(document), None, None)
        except QcdoctorError as exc:
            # the text is generated: its file and line would name nothing the user wrote
            raise CaseError.of(exc, placed=False) from None
        self._document, self._read = document, read

    # -- reading -------------------------------------------------------------------

    @property
    def folder(self) -> Path | None:
        """Where the case's artifacts are read from (None: nowhere)."""
        return self._folder

    @property
    def data(self) -> dict:
        """The case as the reader validated it (a copy): case.yaml's keys and values,
        yes/no words for true/false where the key takes them."""
        return copy.deepcopy(self._read.data)

    def to_yaml(self) -> str:
        """The case.yaml text of the case (what ``save`` writes, and what is triaged)."""
        return _text(self._document)

    def save(self, folder: PathLike | None = None, *, overwrite: bool = False) -> Path:
        """Write the case as ``folder``/case.yaml (by default in the case's folder),
        atomically; the folder is created. A different case.yaml already there is kept
        unless ``overwrite``. Returns the file's path.

        Saved where its folder is (or with no artifacts named), it triages to the same
        report as ``triage()``, the case's path aside.
        """
        from qcdoctor.collectors.case import CASE_FILE
        from qcdoctor.engine.commands.output_file import make_folder, output_target, write_output
        target = given_path(folder, "folder") if folder is not None else self._folder
        if target is None:
            raise CaseError("this case has no folder to be saved in", key="folder",
                            fix="case.save('my_case'), or Case(..., folder='my_case')")
        path = target / CASE_FILE
        text = self.to_yaml()
        if os.path.islink(path):
            raise QcdoctorError("case.yaml is a symlink here: it is not replaced",
                                file=str(path), fix="save the case in another folder, or "
                                                    "remove the link first")
        if os.path.lexists(path):
            _refuse_special(path)
            if _holds(path, text):
                return path
            if not overwrite:
                raise QcdoctorError("a different case.yaml is already there: it is kept",
                                    file=str(path), fix="save the case in another folder, "
                                                        "or pass overwrite=True to replace it")
        make_folder(target)
        write_output(output_target(path), text)
        return path

    # -- diagnosing ----------------------------------------------------------------

    def triage(self, *, lang: str | None = None, use_env: bool = True,
               trust_pickles: bool = False,
               allow_outside: Iterable[PathLike] | PathLike = ()) -> Report:
        """The conclusion report of this case; nothing is written. The arguments as
        ``qcdoctor.triage``'s."""
        return self.diagnose(audit=False, lang=lang, use_env=use_env,
                             trust_pickles=trust_pickles,
                             allow_outside=folders(allow_outside))

    def audit(self, *, lang: str | None = None, use_env: bool = True,
              trust_pickles: bool = False,
              allow_outside: Iterable[PathLike] | PathLike = ()) -> Report:
        """The deployment checklist audit of this case; nothing is written."""
        return self.diagnose(audit=True, lang=lang, use_env=use_env,
                             trust_pickles=trust_pickles,
                             allow_outside=folders(allow_outside))

    def diagnose(self, *, audit: bool, lang: str | None, use_env: bool, trust_pickles: bool,
                 allow_outside: tuple[Path, ...]) -> Report:
        """``triage`` (``audit=False``) or ``audit``."""
        import dataclasses
        import tempfile

        from qcdoctor.collectors.case import CASE_FILE
        from qcdoctor.collectors.files import CaseFiles
        from qcdoctor.collectors.threshold_sources import resolve
        lang = checked_language(lang)
        read = self._read
        if self._folder is not None:
            if not self._folder.is_dir():
                problem = "not a folder" if self._folder.exists() else "no such folder"
                raise CaseError(problem, file=str(self._folder), key="folder",
                                fix="give the folder the case's artifacts are in "
                                    "(case.save() creates it)")
            # read, and protected, where the folder is now, whatever %cd follows
            folder = absolute(self._folder)
            case = dataclasses.replace(read, folder=folder, file=folder / CASE_FILE)
            return diagnose(case, allow_outside, audit=audit, lang=lang,
                            trust_pickles=trust_pickles, use_env=use_env,
                            display=str(self._folder), protected=[case.file])
        # no folder: read as a case.yaml alone in a folder of its own, so the outputs it
        # names are missing as they are beside a case saved on its own; the settings
        # files above that temporary folder are nobody's, and are not read. Once removed,
        # the folder lists no files, as it did: the other language can be made later
        with entered_whole(lambda: tempfile.TemporaryDirectory(prefix="qcdoctor-case-")) \
                as empty:
            case = dataclasses.replace(read, folder=Path(empty), file=None, source_name="")
            try:
                return diagnose(case, allow_outside, audit=audit, lang=lang,
                                trust_pickles=trust_pickles, use_env=use_env,
                                display=_BUILT_IN_PYTHON,
                                protected=[], files=CaseFiles(case.folder, allow_outside),
                                thresholds=resolve(dataclasses.replace(case, folder=None),
                                                   use_env))
            except QcdoctorError as exc:
                if exc.file and Path(exc.file).is_relative_to(empty):
                    exc.file = exc.line = None      # the temporary folder: nobody's file
                    exc.args = (exc.render(),)
                raise

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Case):
            return NotImplemented
        return (self._document, self._folder) == (other._document, other._folder)

    __hash__ = None  # type: ignore[assignment]   # changes as results are added

    def __repr__(self) -> str:
        folder = f"folder={str(self._folder)!r}, " if self._folder is not None else ""
        return f"qcdoctor.Case({folder}data={self.data!r})"

    def _repr_markdown_(self) -> str:
        return f"```yaml\n{self.to_yaml()}```"


def _refuse_special(path: Path) -> None:
    """A QcdoctorError when ``path`` is no regular file: a FIFO, a device, a socket or a
    folder is neither read (a FIFO blocks for ever, /dev/zero never ends) nor replaced,
    as ``-o`` never replaces one."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return                          # gone meanwhile: nothing there to keep
    if stat.S_ISREG(mode):
        return
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device")
    raise QcdoctorError(f"case.yaml here is {kind}, not a file: it is neither read nor "
                        "replaced", file=str(path),
                        fix="save the case in another folder, or remove it first")


def _holds(path: Path, text: str) -> bool:
    """Whether the regular file at ``path`` holds ``text``: opened without blocking and
    never followed (a FIFO or link put there since), read no further than ``text``."""
    data = text.encode("utf-8")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        try:
            return stat.S_ISREG(os.fstat(fd).st_mode) and handle.read(len(data) + 1) == data
        except OSError:
            return False


def _arguments() -> tuple[str, ...]:
    """The constructor's argument names: case.yaml's top-level keys and the others."""
    from qcdoctor.collectors.case_file import CASE_SCHEMA
    return (*(k for k in CASE_SCHEMA.fields if k != "schema"), *_NOT_KEYS)


def _text(document: dict) -> str:
    """case.yaml of ``document``: keys in the order docs/case-file.md lists them, short
    lists and stage entries on one line, as the examples write them."""
    import yaml

    from qcdoctor.collectors.case_file import CASE_SCHEMA, SCHEMA_ID
    ordered = {"schema": SCHEMA_ID}
    ordered.update((k, document[k]) for k in CASE_SCHEMA.fields if k in document)
    return HEADER + yaml.dump(ordered, Dumper=_dumper(), sort_keys=False, allow_unicode=True,
                              default_flow_style=None, width=100)


def _dumper():
    import yaml

    class Dumper(yaml.SafeDumper):
        """PyYAML's safe dumper without anchors: a value given twice is written twice."""

        def ignore_aliases(self, data):
            return True
    return Dumper


def _stage_entry(stage: str, result: Any, metric: str | None) -> dict | None:
    """A stage's case.yaml entry from a number, a status word or a mapping."""
    key = f"stages.{stage}"
    if result is None:
        return None
    if isinstance(result, bool):
        raise CaseError("found a boolean, not a stage result", key=key,
                        fix=f"give the metric's value ({stage!r}: 0.449), a status "
                            f"('abnormal') or a mapping ({{'metric': 'mAP', 'value': 0.449}})")
    if isinstance(result, numbers.Real):
        return {"metric": metric, "value": result} if metric else {"value": result}
    if isinstance(result, str):
        return {"status": result}
    if isinstance(result, Mapping):
        entry = _mapping(result, key)
        if metric and "value" in entry and "metric" not in entry:
            entry = {"metric": metric, **entry}
        return entry
    raise CaseError(f"found {type(result).__name__}, not a stage result", key=key,
                    fix=f"give the metric's value ({stage!r}: 0.449), a status ('abnormal') "
                        "or a mapping ({'metric': 'mAP', 'value': 0.449})")


def _mapping(value: Any, key: str) -> dict:
    plain = _plain(value, key)
    if not isinstance(plain, dict):
        raise CaseError(f"expected a mapping, found {type(value).__name__}", key=key,
                        fix=f"give {key} as a dict, as docs/case-file.md shows it")
    return plain


def _plain(value: Any, key: str) -> Any:
    """``value`` as YAML writes it: text, numbers, true/false, lists and mappings of them
    (numpy scalars, paths and str Enum members included; keys whose value is None left
    out); anything else is a CaseError naming ``key``."""
    return plain_data(value, key, error=CaseError, holder="a case", drop_none=True)


def _metric(metric: Any) -> str | None:
    """The metric name given for bare stage values: text, or None."""
    if metric is None or isinstance(metric, str):
        return metric
    raise CaseError(f"expected the metric's name as text, found {shown(metric)}", key="metric",
                    fix="metric='mAP'")


def _stage_id(stage: Any) -> str:
    """A stage id given to ``Case.stage``, as text; whether it is a stage the case file
    knows is the reader's to say."""
    plain = _plain(stage, "stages")
    if isinstance(plain, str):
        return plain
    raise CaseError(f"a stage id is text, found {shown(stage)}", key="stages",
                    fix="case.stage('qat_bc', 0.449); the stage ids are: "
                        + ", ".join(STAGES))
