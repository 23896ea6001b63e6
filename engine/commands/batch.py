"""Many cases in one run: find them, triage each (in worker processes with --jobs N),
and keep one summary row per case. A case that fails never stops the batch: its row
carries the error and exit level 2.

The rules are compiled once per process (``bundled_runner``); each worker process has its
own engine worker. Results always come back in input order.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Callable, Iterator

from qcdoctor.collectors.bundle import is_bundle
from qcdoctor.collectors.case import CASE_FILE
from qcdoctor.errors import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, QcdoctorError

ERROR_SCHEMA = "qcdoctor/batch-error-v1"


@dataclass(frozen=True)
class Settings:
    """What every case of the batch is triaged and rendered with (sent to the workers)."""
    fmt: str | None = None          # per-case output (md, html, json, sarif, junit, jsonl)
    audit: bool = False
    lang: str | None = None
    trust_pickles: bool = False
    use_env: bool = True
    allow_outside: tuple[str, ...] = ()
    fail_on: str = "never"


@dataclass
class CaseInput:
    path: str                       # as the user gave it (or as found under it)
    problem: str | None = None      # why it is no case at all (missing, not a case folder)


@dataclass
class CaseResult:
    """A summary row, and the case's rendered report when one was asked for."""
    case: str
    stage: str = ""
    determined: bool = False
    suspect: str = ""
    first_action: str = ""
    first_kind: str = ""                # the first action's kind, shown in words
    failed: list[str] = field(default_factory=list)
    exit: int = EXIT_OK
    error: str | None = None
    text: str | None = field(default=None, repr=False)

    def row(self) -> dict:
        row = asdict(self)
        del row["text"]
        return row


def find_cases(paths: list[str], recursive: bool) -> list[CaseInput]:
    """The cases under ``paths`` in the order given (folders found with --recursive in
    sorted order); a path that is no case becomes an input that carries its problem."""
    found: list[CaseInput] = []
    for given in paths:
        path = Path(given)
        if is_bundle(path) and path.is_file():
            found.append(CaseInput(given))
        elif path.is_file() and path.name == CASE_FILE:
            found.append(CaseInput(given))
        elif not path.exists():
            found.append(CaseInput(given, "no such file or folder (check the path)"))
        elif not path.is_dir():
            found.append(CaseInput(given, f"not a case folder nor a {CASE_FILE} (give the "
                                          "folder that holds case.yaml)"))
        elif (path / CASE_FILE).is_file():
            found.append(CaseInput(given))
        elif recursive:
            below = _case_folders(path)
            if not below:
                found.append(CaseInput(given, f"no folder with a {CASE_FILE} below it"))
            found += [CaseInput(str(p)) for p in below]
        else:
            found.append(CaseInput(given, f"no {CASE_FILE} in this folder (add --recursive "
                                          "to triage every case folder below it)"))
    return found


def _case_folders(root: Path) -> list[Path]:
    """Folders holding case.yaml below ``root``; a case folder's own subfolders are its
    artefacts, not more cases. Symlinked folders are not followed."""
    from qcdoctor.collectors.files import walk
    cases = []
    for folder, dirs, files in walk(root):
        if CASE_FILE in files and folder != root:
            cases.append(folder)
            dirs[:] = []
    return cases


def triage_one(case: CaseInput, settings: Settings) -> CaseResult:
    """One case of the batch, never raising: a bad case is a row with its error."""
    if case.problem:
        return CaseResult(case.path, exit=EXIT_ERROR, error=f"{case.path}: {case.problem}")
    try:
        report = _triage(case.path, settings)
    except QcdoctorError as exc:      # the error names the case, whatever went wrong
        error = exc.render() if exc.file else f"{case.path}: {exc.render()}"
        return CaseResult(case.path, exit=EXIT_ERROR, error=error)
    except Exception as exc:  # noqa: BLE001 - a defect on one case must not stop the rest
        from qcdoctor.errors import shorten
        return CaseResult(case.path, exit=EXIT_ERROR,
                          error=f"{case.path}: internal error: {type(exc).__name__}: "
                                f"{shorten(exc)} (please report it with the case)")
    return _result(case.path, report, settings)


def _triage(path: str, settings: Settings) -> dict:
    from qcdoctor.engine.diagnosis.triage import triage_path
    return triage_path(path, allow_outside=settings.allow_outside, lang=settings.lang,
                       trust_pickles=settings.trust_pickles, full_checklist=settings.audit,
                       use_env=settings.use_env)


def _result(path: str, report: dict, settings: Settings) -> CaseResult:
    from qcdoctor.engine.diagnosis.checklist_counts import failed_items
    from qcdoctor.engine.diagnosis.diagnose import fails_on
    conclusion = report["conclusion"]
    worse = fails_on(report, settings.fail_on)
    result = CaseResult(
        path, stage=conclusion["stage"], determined=conclusion["determined"],
        suspect=conclusion["suspect"] or "",
        first_action=report["next_actions"][0]["id"] if report["next_actions"] else "",
        first_kind=report["next_actions"][0]["kind"] if report["next_actions"] else "",
        failed=[c["id"] for c in failed_items(report)],
        exit=EXIT_FINDINGS if worse else EXIT_OK)
    if settings.fmt == "jsonl":
        from qcdoctor.safe_text import json_text  # as --format json: controls escaped
        result.text = json_text(json.dumps(report, ensure_ascii=False)) + "\n"
    elif settings.fmt:
        from qcdoctor.engine.reports.formats import render_output
        result.text = render_output(report, settings.fmt, audit=settings.audit)
    return result


def error_line(result: CaseResult) -> str:
    """The --format jsonl line of a case that has no report."""
    from qcdoctor.safe_text import json_text
    return json_text(json.dumps({"schema": ERROR_SCHEMA, "case": result.case,
                                 "error": result.error}, ensure_ascii=False)) + "\n"


def run_batch(cases: list[CaseInput], settings: Settings, jobs: int = 1,
              progress: Callable[[str, int, int], None] | None = None) -> Iterator[CaseResult]:
    """The results in input order, as they become ready. ``jobs`` 1 runs here, in this
    process; more run in that many worker processes, each with its own engine worker."""
    jobs = max(1, min(jobs, len(cases)))
    if jobs == 1:
        results = map(triage_one, cases, repeat(settings))
        yield from _counted(results, cases, progress)
        return
    # imported here: a batch run in this process (--jobs 1) needs neither
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    # chunks keep the hand-over cheap; small enough that both workers stay busy to the end
    chunk = max(1, min(16, len(cases) // (jobs * 8)))
    before = set(multiprocessing.active_children())     # e.g. this process's engine worker
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context(method),
                               initializer=_start_worker)
    # submitted by hand, not with pool.map: map cancels what is left when it is closed,
    # and the pool's own thread then fails on the cancelled futures of stopped workers
    futures = [pool.submit(_triage_chunk, cases[i:i + chunk], settings)
               for i in range(0, len(cases), chunk)]
    try:
        yield from _counted((r for f in futures for r in f.result()), cases, progress)
    except BaseException:
        # Ctrl-C, or a consumer that stops early: the cases under way are not waited for.
        # The workers are ended first (the pool would join workers still busy, or blocked
        # handing in results); then the pool's own threads, which see them gone, are
        # joined, so none is left running in the caller (a later fork would be refused)
        _end(set(multiprocessing.active_children()) - before)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()


def _triage_chunk(cases: list[CaseInput], settings: Settings) -> list[CaseResult]:
    return [triage_one(case, settings) for case in cases]


def _end(workers) -> None:
    """Ask the workers to stop (they stop their engine workers), then make sure."""
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join(timeout=3)
        if worker.is_alive():
            worker.kill()
            worker.join()


def _counted(results, cases, progress) -> Iterator[CaseResult]:
    for done, result in enumerate(results, 1):
        if progress:
            progress(result.case, done, len(cases))
        yield result


def _start_worker() -> None:
    """A batch worker process: its own engine worker, compiling while the first case loads,
    and stopped (its log file removed) when the pool ends or the parent is gone."""
    import signal
    import threading
    from multiprocessing.util import Finalize

    from qcdoctor.engine.matching.engine_process import engine_process
    from qcdoctor.engine.matching.runner import bundled_runner
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, _stop)
    bundled_runner().warm()
    Finalize(None, engine_process().close, exitpriority=10)
    threading.Thread(target=_leave_with_parent, args=(os.getppid(),), daemon=True,
                     name="qcdoctor-batch-watch").start()


def _stop(signum=None, frame=None) -> None:
    """Leave now, stopping this worker's engine worker (and removing its log) and removing
    the bundle it has extracted first: os._exit runs no ``with`` block on the way out."""
    from qcdoctor.collectors.bundle import remove_extracted
    from qcdoctor.engine.matching.engine_process import engine_process
    remove_extracted()
    engine_process().close()
    os._exit(1)


def _leave_with_parent(parent: int) -> None:
    """An idle worker waits on the task queue forever, even once the parent is gone
    (interrupted, killed): it leaves as soon as it sees that, stopping its engine worker."""
    import time
    while os.getppid() == parent:
        time.sleep(0.5)
    _stop()


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


def worst_exit(results: list[CaseResult]) -> int:
    return max((r.exit for r in results), default=EXIT_OK)
