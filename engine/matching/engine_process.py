"""The rule engine in a worker process, so a crash in durable_rules' C code never reaches us.

durable_rules corrupts its heap in ways that show up at random (see ``durable_host``).
The caller's process never loads it: it keeps the catalogue of rulesets and of case
programs (what to do with one case's facts: which rulesets in which order, what to
derive between them) and sends each case to a worker in one request. The worker
compiles the catalogue when it starts (``warm`` starts one early, so it compiles while
the caller collects facts) and readies engine states while the caller works.

- A worker that dies (signal, abort, time-out) is replaced and the match re-run once;
  a match that kills two workers raises ``EngineCrash`` for that case alone.
- A worker that reported any error is replaced, so no case sees a damaged engine.
- Every match runs in a fresh engine state, so no case ever sees another's facts.
  States are never emptied (that path crashes), so a worker is replaced once it holds
  ``MAX_WORKER_GROWTH_MB`` more than it started with or nears durable_rules' 1,024 states per ruleset, and after
  ``max_matches`` matches in any case.
"""

from __future__ import annotations

import atexit
import faulthandler
import importlib
import os
import signal
import tempfile
import threading
from dataclasses import dataclass, field

from qcdoctor.engine.matching.child_process import ForkedProcess
from qcdoctor.engine.matching.worker_memory import Growth
from qcdoctor.errors import QcdoctorError

MAX_MATCHES_PER_WORKER = 2000
# the memory a worker may gain past what it started with (engine states are never freed)
MAX_WORKER_GROWTH_MB = 320
MATCH_TIMEOUT_S = 60.0
# a worker this worn (share of its memory, state or match limits) gets a successor that
# starts compiling at once, so replacing it costs the caller nothing
STANDBY_AT = 0.75
_REPORT_FIX = ("this is a defect of qcdoctor, not of your case: send the case folder to the "
               "qcdoctor maintainers")


class EngineFailure(QcdoctorError):
    """The rule engine rejected a case (an action raised, or the C engine returned an error)."""

    def __init__(self, problem: str):
        super().__init__(f"the rule engine failed on this case: {problem}", fix=_REPORT_FIX)


class EngineCrash(EngineFailure):
    """A case killed two engine workers in a row."""


class InvalidFacts(ValueError):
    """A case program refused its facts before matching anything (the worker stays usable)."""


def _start_method() -> str:
    return "fork" if hasattr(os, "fork") else "spawn"


def _worker_log() -> tuple[int, str]:
    """(descriptor, path) of the file the worker's stderr goes to. Where no temporary
    folder takes a file (a full disk, ``ulimit -f 0``), the null device: the rules still
    run, only a dying worker's last words are not kept."""
    try:
        return tempfile.mkstemp(prefix="qcdoctor-engine-", suffix=".log")
    except OSError:
        return os.open(os.devnull, os.O_RDWR), os.devnull


def _serve(conn, catalogue: dict, programs: dict, log: str | int) -> None:
    """Worker loop: (program, facts, derive) in; ("ok", hits, matches, wear, growth MB),
    ("invalid", text) or ("error", text) out (wear: the share of its limits used)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the caller handles Ctrl-C
    # what the C engine or the interpreter print when they die goes to a file the caller
    # quotes in its message, not onto the user's terminal
    faulthandler.disable()
    if isinstance(log, int):            # forked: the caller's descriptor of an unlinked file
        os.dup2(log, 2)
        os.close(log)
    else:
        with open(log, "ab", buffering=0) as handle:
            os.dup2(handle.fileno(), 2)
    try:
        from qcdoctor.engine.matching.durable_host import QuietHost
        host = QuietHost()
        for name, (patterns, usual) in catalogue.items():
            host.register(name, patterns, usual)
    except Exception as exc:  # noqa: BLE001 - sent back as the answer to every request
        broken = f"{type(exc).__name__}: {exc}"
    else:
        broken = None
    _preload(programs)
    growth = Growth()                   # what it inherited is not its own
    parent = os.getppid()
    while True:
        try:
            while not conn.poll(0):
                if broken or not host.prepare_spare():     # idle: ready the next states
                    break
            while not conn.poll(1.0):
                if os.getppid() != parent:     # the caller is gone: nobody will ask again
                    return
            request = conn.recv()
        except (EOFError, OSError):
            break
        if request is None:
            break
        if broken:
            conn.send(("error", broken))
            continue
        name, facts, derive = request
        try:
            hits, matches = programs[name].run(host, facts, derive)
        except InvalidFacts as exc:
            conn.send(("invalid", str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001 - the C engine's errors are plain exceptions
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        conn.send(("ok", hits, matches, max(growth.mb / MAX_WORKER_GROWTH_MB, host.wear()),
                   growth.mb))
        growth.refresh()            # while the caller reads the reply: the next one carries it
    conn.close()


def _preload(programs: dict) -> None:
    """Import what the programs will call while the caller is still starting up; a module
    that fails here fails again, with its message, where it is used."""
    for program in programs.values():
        for module in getattr(program, "preload", ()):
            try:
                importlib.import_module(module)
            except Exception:  # noqa: BLE001 - reported by the request that needs it
                pass


class _WorkerDied(Exception):
    pass


@dataclass
class _Worker:
    process: object             # a ForkedProcess, or a multiprocessing.Process (spawn)
    conn: object
    names: frozenset
    log: str | int              # its stderr: an unlinked file's descriptor (forked) or a path
    matches: int = 0

    def call(self, request, timeout: float):
        try:
            self.conn.send(request)
            if not self.conn.poll(timeout):
                raise _WorkerDied(f"no answer within {timeout:.0f} s")
            return self.conn.recv()
        except (EOFError, OSError) as exc:
            raise _WorkerDied(self._death()) from exc

    def _death(self) -> str:
        self.process.join(timeout=5)
        code = self.process.exitcode
        if code is not None and code < 0:
            try:
                why = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                why = f"killed by signal {-code}"
        else:
            why = f"exited with status {code}"
        last = self.last_words()
        return f"{why}: {last}" if last else why

    def last_words(self) -> str:
        """The last line the worker printed to stderr, if any."""
        try:
            if isinstance(self.log, int):
                size = os.fstat(self.log).st_size
                tail = os.pread(self.log, 400, max(0, size - 400))
            else:
                with open(self.log, "rb") as handle:
                    handle.seek(max(0, os.path.getsize(self.log) - 400))
                    tail = handle.read()
            lines = tail.decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][:200] if lines else ""

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.process.join(timeout=2)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        try:
            self.conn.close()
        except OSError:
            pass
        try:
            if isinstance(self.log, int):
                os.close(self.log)
            elif self.log != os.devnull:
                os.unlink(self.log)
        except OSError:
            pass


@dataclass
class EngineStats:
    workers_started: int = 0
    worker_deaths: int = 0
    matches: int = 0
    last_worker_pid: int | None = None
    last_worker_growth_mb: float = -1.0
    deaths: list = field(default_factory=list)


class EngineProcess:
    """Rulesets registered here are matched in a replaceable worker process."""

    def __init__(self, *, max_matches: int = MAX_MATCHES_PER_WORKER,
                 timeout: float = MATCH_TIMEOUT_S, start_method: str | None = None):
        self._catalogue: dict[str, tuple[dict, frozenset]] = {}   # name -> (patterns, usual)
        self._programs: dict[str, object] = {}
        self._worker: _Worker | None = None
        self._standby: _Worker | None = None      # the next worker, started ahead of need
        self._lock = threading.RLock()
        self._max_matches = max_matches
        self._timeout = timeout
        self._method = start_method or _start_method()
        self.stats = EngineStats()

    def register(self, name: str, patterns: dict[str, list],
                 usual: frozenset = frozenset()) -> None:
        """A ruleset ``{rule_id: durable 'all' patterns}``; ``usual``: the fact types nearly
        every case has (a hint for sharding, see ``durable_host``)."""
        with self._lock:
            if name in self._catalogue:
                raise ValueError(f"ruleset {name} already registered")
            self._catalogue[name] = (patterns, frozenset(usual))

    def register_program(self, name: str, program) -> None:
        """A case program: ``program.run(host, facts, derive)`` runs in the worker and returns
        (hits, matches made); it must pickle where workers are spawned, not forked."""
        with self._lock:
            if name in self._programs:
                raise ValueError(f"program {name} already registered")
            self._programs[name] = program

    def _names(self) -> frozenset:
        return frozenset(self._catalogue) | frozenset(self._programs)

    def warm(self) -> None:
        """Start a worker for the current catalogue now, if none is running."""
        with self._lock:
            while self._worker is not None and self._worker.names != self._names():
                self._discard()             # a standby takes over only if it is current
            if self._worker is None:
                self._worker = self._spawn()

    def run(self, name: str, facts: list[dict], derive=None) -> list:
        """The hits of program ``name`` on one case's ``facts``, in one request to the worker."""
        with self._lock:
            if name not in self._programs:
                raise KeyError(f"unknown program {name}")
            deaths = []
            while len(deaths) < 2:
                worker = self._ready(name)
                try:
                    reply = worker.call((name, facts, derive), self._timeout)
                except _WorkerDied as exc:
                    deaths.append(str(exc))
                    self._record_death(str(exc))
                    continue
                except BaseException:
                    self._discard()          # interrupted mid-call: its answer is lost
                    raise
                if reply[0] == "invalid":
                    raise ValueError(reply[1])
                if reply[0] != "ok":
                    self._discard()          # never reuse an engine that reported an error
                    raise EngineFailure(reply[1])
                _, hits, matches, wear, grown = reply
                worker.matches += matches
                self.stats.matches += matches
                self.stats.last_worker_growth_mb = grown
                wear = max(wear, worker.matches / self._max_matches)
                if wear >= 1:
                    self._discard()
                elif wear >= STANDBY_AT and self._standby is None:
                    self._standby = self._spawn()    # compiles while this one serves
                return hits
            raise EngineCrash("it stopped the engine worker twice (" + "; ".join(deaths) + ")")

    def _ready(self, name: str) -> _Worker:
        if self._worker is not None and (name not in self._worker.names
                                         or not self._worker.process.is_alive()):
            self._discard()
        if self._worker is None:
            self._worker = self._spawn()
        return self._worker

    def _spawn(self) -> _Worker:
        handle, path = _worker_log()
        if self._method == "fork":
            # unlinked at once: nothing is left behind however either process ends
            if path != os.devnull:
                os.unlink(path)
            log = handle
            # it lives long: it keeps none of the caller's descriptors but its log
            process = ForkedProcess(_serve, (dict(self._catalogue), dict(self._programs), log),
                                    keep_fds=(log,))
            ours = process.channel
        else:                               # no fork here: multiprocessing starts it afresh
            os.close(handle)
            log = path
            args = (dict(self._catalogue), dict(self._programs), log)
            import multiprocessing
            ctx = multiprocessing.get_context(self._method)
            ours, theirs = ctx.Pipe()
            process = ctx.Process(target=_serve, args=(theirs, *args), name="qcdoctor-engine",
                                  daemon=True)
            process.start()
            theirs.close()
        self.stats.workers_started += 1
        self.stats.last_worker_pid = process.pid
        return _Worker(process, ours, self._names(), log)

    def _record_death(self, why: str) -> None:
        self.stats.worker_deaths += 1
        self.stats.deaths.append(why)
        self._discard()

    def _discard(self) -> None:
        """Stop the current worker; a standby for the same catalogue takes its place."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()
        standby, self._standby = self._standby, None
        if standby is not None:
            if standby.names == self._names() and standby.process.is_alive():
                self._worker = standby
            else:
                standby.stop()

    def worker_pid(self) -> int | None:
        with self._lock:
            return self._worker.process.pid if self._worker else None

    def close(self) -> None:
        with self._lock:
            self._discard()
            self._discard()                  # the standby, promoted by the first


_shared: EngineProcess | None = None
_shared_lock = threading.Lock()


def engine_process() -> EngineProcess:
    """The process-wide engine; its worker is stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = EngineProcess()
            atexit.register(_shared.close)
        return _shared


def _forget_parents_worker() -> None:
    """In a forked child (a batch worker), the inherited worker and its pipe are the
    parent's: forget them without a word on that pipe, so the child starts its own."""
    global _shared_lock
    _shared_lock = threading.Lock()
    if _shared is not None:
        inherited = (_shared._worker, _shared._standby)
        _shared._worker = _shared._standby = None
        _shared._lock = threading.RLock()
        for worker in inherited:
            if worker is not None:
                try:
                    worker.conn.close()     # our copies of the descriptors only
                    if isinstance(worker.log, int):
                        os.close(worker.log)
                except OSError:
                    pass


os.register_at_fork(after_in_child=_forget_parents_worker)
