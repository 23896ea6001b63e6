"""Many cases in one run: find them, triage each (in worker processes with --jobs N),
and keep one summary row per case. A case that fails never stops the batch: its row
carries the error and exit level 2.

The rules are compiled once per process (``bundled_runner``); each worker process has its
own engine worker, and a worker that dies is replaced (``_Workers``). Results always come
back in input order.
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import asdict, dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Callable, Iterator

from qcdoctor.collectors.bundle import is_bundle
from qcdoctor.collectors.case import CASE_FILE
from qcdoctor.collectors.files import length_problem
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
    first_text: str = ""                # the first action itself, as the report says it
    first_cost: str = ""                # its cost class (verify, analyse, ...)
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
        too_long = length_problem(given)        # pathlib's tests below would raise on it
        if too_long:
            found.append(CaseInput(given, too_long))
        elif is_bundle(path) and path.is_file():
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
    first = report["next_actions"][0] if report["next_actions"] else {}
    result = CaseResult(
        path, stage=conclusion["stage"], determined=conclusion["determined"],
        suspect=conclusion["suspect"] or "", first_action=first.get("id", ""),
        first_kind=first.get("kind", ""), first_text=first.get("text", ""),
        first_cost=first.get("cost", ""), failed=[c["id"] for c in failed_items(report)],
        exit=EXIT_FINDINGS if worse else EXIT_OK)
    if settings.fmt == "jsonl":
        from qcdoctor.safe_text import json_text  # as --format json: controls escaped
        result.text = json_text(json.dumps(report, ensure_ascii=False)) + "\n"
    elif settings.fmt:
        from qcdoctor.engine.reports.formats import render_output
        result.text = render_output(report, settings.fmt, audit=settings.audit,
                                    fail_on=settings.fail_on)
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
    workers = _Workers(cases, settings, jobs)
    try:
        yield from _counted(workers.results(), cases, progress)
    except BaseException:
        # Ctrl-C, SIGTERM, or a consumer that stops early: the cases under way are not
        # waited for, and no worker is left running
        workers.end()
        raise
    workers.close()


@dataclass(eq=False)                    # each one itself, whatever it holds
class _Worker:
    process: object                     # a multiprocessing Process running ``_serve``
    conn: object                        # our end of its channel
    doing: deque = field(default_factory=deque)    # the cases sent, not answered, in order


class _Workers:
    """The batch's worker processes, and which cases each has in hand. A worker that dies
    (a signal, the out-of-memory killer) is replaced, as the engine worker is: the case it
    was triaging is tried once more, alone, in a fresh worker; if that one dies too, the
    case fails alone, naming how. The cases it had not started go to the others."""

    def __init__(self, cases: list[CaseInput], settings: Settings, jobs: int):
        # imported here: a batch run in this process (--jobs 1) needs none of it
        import multiprocessing
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        self._context = multiprocessing.get_context(method)
        self._cases, self._settings, self._jobs = cases, settings, jobs
        # chunks keep the hand-over cheap; small enough that all workers stay busy to the end
        self._chunk = max(1, min(16, len(cases) // (jobs * 8)))
        self._todo = deque(range(len(cases)))
        self._ready: dict[int, CaseResult] = {}
        self._deaths: dict[int, str] = {}       # a case whose worker died once: how
        self._running: list[_Worker] = []
        # the workers' temporary files (extracted bundles, engine logs) go in a folder of
        # the batch's own, removed once they are gone: a worker killed before it could
        # clean up (stopped under load) leaves nothing behind
        self._scratch: str | None = None

    def results(self) -> Iterator[CaseResult]:
        for position in range(len(self._cases)):
            while position not in self._ready:
                self._hand_out()
                self._receive()
            yield self._ready.pop(position)

    def _hand_out(self) -> None:
        while self._todo and len(self._running) < self._jobs:
            self._start()
        for worker in self._running:
            if self._todo and not worker.doing:
                take = min(self._chunk, len(self._todo))
                self._give(worker, [self._todo.popleft() for _ in range(take)])

    def _start(self) -> _Worker:
        if self._scratch is None:
            import tempfile
            self._scratch = tempfile.mkdtemp(prefix="qcdoctor-batch-")
        ours, theirs = self._context.Pipe()
        worker = _Worker(self._context.Process(target=_serve,
                                               args=(theirs, self._settings, self._scratch),
                                               name="qcdoctor-batch"), ours)
        self._running.append(worker)    # before it starts: an interrupt now still ends it
        try:
            worker.process.start()
        except OSError as exc:          # no process can be made (a process limit, memory)
            self._running.remove(worker)
            ours.close()
            raise QcdoctorError(f"cannot start a worker process: {exc.strerror or exc}",
                                fix="run fewer at a time (--jobs 1 runs every case in "
                                    "this process)") from None
        finally:
            theirs.close()
        return worker

    def _give(self, worker: _Worker, positions: list[int]) -> None:
        worker.doing.extend(positions)
        try:
            worker.conn.send([(i, self._cases[i]) for i in positions])
        except OSError:             # it is gone: its end of the channel tells _receive
            pass

    def _receive(self) -> None:
        """Wait until a worker sends a result or dies."""
        from multiprocessing.connection import wait
        waiting = {}
        for worker in self._running:
            waiting[worker.conn] = waiting[worker.process.sentinel] = worker
        for worker in {waiting[ready] for ready in wait(list(waiting))}:
            self._collect(worker)

    def _collect(self, worker: _Worker) -> None:
        # asked first: all a dead worker sent is in the channel, and read, before it is
        # taken for dead (a case it finished is never blamed for its death)
        alive = worker.process.is_alive()
        try:
            while worker.conn.poll():
                position, result = worker.conn.recv()
                worker.doing.remove(position)
                self._ready[position] = result
        except (EOFError, OSError):
            alive = False
        if not alive:
            self._died(worker)

    def _died(self, worker: _Worker) -> None:
        self._running.remove(worker)
        why = _ended(worker)
        if not worker.doing:
            return
        suspect, *rest = worker.doing
        self._todo.extendleft(reversed(rest))           # not started: no one's fault
        if suspect in self._deaths:
            self._ready[suspect] = _worker_killed(self._cases[suspect],
                                                  self._deaths[suspect], why)
            return
        self._deaths[suspect] = why
        self._give(self._start(), [suspect])

    def end(self) -> None:
        """Stop every worker now (each stops its engine worker), then make sure."""
        for worker in self._running:
            worker.process.terminate()
        for worker in self._running:
            _ended(worker, within=3)
        self._running = []
        self._remove_scratch()

    def _remove_scratch(self) -> None:
        if self._scratch is not None:
            import shutil
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def close(self) -> None:
        """After the last result: each worker is told to leave, and waited for."""
        for worker in self._running:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        for worker in self._running:
            _ended(worker, within=10)
        self._running = []
        self._remove_scratch()


def _ended(worker: _Worker, within: float = 5) -> str:
    """How ``worker`` ended, once it has (killed if it has not within ``within`` s)."""
    import signal
    if worker.process.pid is None:      # interrupted before it started
        worker.conn.close()
        return "the worker never started"
    worker.process.join(timeout=within)
    if worker.process.exitcode is None:
        worker.process.kill()
        worker.process.join()
    worker.conn.close()
    code = worker.process.exitcode
    if code >= 0:
        return f"the worker exited with status {code}"
    try:
        return f"the worker ended by signal {signal.Signals(-code).name}"
    except ValueError:
        return f"the worker ended by signal {-code}"


def _worker_killed(case: CaseInput, first: str, second: str) -> CaseResult:
    """The row of a case that ended two workers."""
    again = "again" if first == second else f"then {second.removeprefix('the worker ')}"
    error = QcdoctorError(
        f"{first} while triaging this case, and {again} when it was retried in a fresh "
        "worker; the other cases are not affected", file=case.path,
        fix=f"triage it alone (qcdoctor triage {case.path}): if it fails there too and "
            "nothing else ended the process (the out-of-memory killer, a job limit), send "
            "the case to the qcdoctor maintainers")
    return CaseResult(case.path, exit=EXIT_ERROR, error=error.render())


def _serve(conn, settings: Settings, scratch: str | None = None) -> None:
    """A batch worker: chunks of (position, case) in, one (position, result) out per case
    as soon as it is done, so a worker that dies loses only the case it was on; its
    temporary files in ``scratch``, the batch's folder."""
    if scratch is not None:
        import tempfile
        tempfile.tempdir = scratch
    _start_worker()
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        for position, case in chunk:
            result = triage_one(case, settings)
            try:
                conn.send((position, result))
            except OSError:             # the batch is gone
                return


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
    try:
        bundled_runner().warm()
    except Exception:  # noqa: BLE001 - each case that needs the rules fails with the message
        pass
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
    """An idle worker waits for work forever, even once the parent is gone (interrupted,
    killed; the workers started after it hold the parent's end of its channel too): it
    leaves as soon as it sees that, stopping its engine worker."""
    import time
    while os.getppid() == parent:
        time.sleep(0.5)
    _stop()


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


def worst_exit(results: list[CaseResult]) -> int:
    return max((r.exit for r in results), default=EXIT_OK)


# what a case concluded, one of these each: their counts add up to the batch's cases
OUTCOMES = ("stage_found", "undetermined", "no_problem", "error")


def outcome(row: dict) -> str:
    """What the case of a summary row concluded: a broken stage found, no stage decided,
    no consistency problem, or no conclusion at all (the case could not be triaged)."""
    if row["error"]:
        return "error"
    if row["stage"] == "none":
        return "no_problem"
    if row["determined"] and row["stage"] != "undetermined":
        return "stage_found"
    return "undetermined"


def batch_counts(rows: list[dict]) -> dict[str, int]:
    """The batch in numbers: cases by outcome (together, every case once), and beside
    them the cases with a failed checklist item and those with a finding at --fail-on."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for row in rows:
        counts[outcome(row)] += 1
    return {"total": len(rows), **counts,
            "failed_checks": sum(bool(row["failed"]) for row in rows),
            "at_fail_on": sum(row["exit"] == EXIT_FINDINGS for row in rows)}
