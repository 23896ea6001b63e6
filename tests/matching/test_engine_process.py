"""The engine worker: a crash in durable_rules' C code never reaches the caller, a case
never sees another's facts, and workers are replaced before damage can accumulate."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from qcdoctor.collectors import limits
from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.matching import durable_host
from qcdoctor.engine.matching.engine_process import EngineCrash, EngineFailure, EngineProcess
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.engine.matching.runner import MAX_ENGINE_STRING, RuleRunner, engine_fact
from qcdoctor.engine.reports.formats import render
from qcdoctor.errors import QcdoctorError
from tests.conftest import REPO, triage_dict

CONVERT = {"evidence": ["dataset_eval"], "badcase": "available", "platform": {"chip": "J6E"},
           "stages": {"qat": {"metric": "mAP", "value": 0.452},
                      "qat_bc": {"metric": "mAP", "value": 0.452},
                      "quantized_bc": {"metric": "mAP", "value": 0.391}}}
TRANSITION = {"type": "transition", "from": "qat_bc", "to": "quantized_bc", "gap": 0}


@pytest.fixture
def engine():
    process = EngineProcess()
    yield process
    process.close()


def _st050(engine: EngineProcess) -> RuleRunner:
    return RuleRunner([r for r in load_rules() if r.id == "ST050"], engine=engine)


def test_a_killed_worker_is_replaced_and_the_case_rerun(engine):
    runner = _st050(engine)
    assert [h.rule.id for h in runner.run([TRANSITION])] == ["ST050"]
    first = engine.worker_pid()
    os.kill(first, signal.SIGSEGV)
    assert [h.rule.id for h in runner.run([TRANSITION])] == ["ST050"]
    assert engine.worker_pid() not in (None, first)
    assert engine.stats.worker_deaths == 1 and "SIGSEGV" in engine.stats.deaths[0]


def test_a_case_that_kills_two_workers_fails_alone(monkeypatch, engine):
    runner = _st050(engine)

    def crash(self, name, facts, gate):
        os.kill(os.getpid(), signal.SIGSEGV)
    monkeypatch.setattr(durable_host.QuietHost, "match", crash)   # inherited by the fork
    with pytest.raises(EngineCrash, match="stopped the engine worker twice.*SIGSEGV") as info:
        runner.run([TRANSITION])
    assert isinstance(info.value, QcdoctorError) and "maintainers" in info.value.render()
    assert engine.stats.worker_deaths == 2
    monkeypatch.undo()
    assert [h.rule.id for h in runner.run([TRANSITION])] == ["ST050"]


def test_a_hanging_worker_is_stopped_after_the_time_limit(monkeypatch):
    engine = EngineProcess(timeout=1.0)
    try:
        runner = _st050(engine)
        monkeypatch.setattr(durable_host.QuietHost, "match",
                            lambda self, name, facts, gate: time.sleep(600))
        started = time.monotonic()
        with pytest.raises(EngineCrash, match="no answer within 1 s"):
            runner.run([TRANSITION])
        assert time.monotonic() - started < 30
    finally:
        engine.close()


def test_engine_errors_replace_the_worker(monkeypatch, engine):
    runner = _st050(engine)
    runner.run([TRANSITION])
    first = engine.worker_pid()

    def refuse(self, name, facts, gate):
        raise RuntimeError("Could not assert fact, error code: 314")
    monkeypatch.setattr(durable_host.QuietHost, "match", refuse)
    engine.close()                           # the next worker forks with the patch
    with pytest.raises(EngineFailure, match="error code: 314"):
        runner.run([TRANSITION])
    assert engine.worker_pid() is None
    monkeypatch.undo()
    assert [h.rule.id for h in runner.run([TRANSITION])] == ["ST050"]
    assert engine.worker_pid() != first


def _convert_facts():
    from qcdoctor.collectors.case_facts import collect_facts
    from tests.conftest import case_from
    return collect_facts(case_from(CONVERT), environ={}, installed={})


def test_workers_are_recycled_after_a_number_of_matches():
    engine = EngineProcess(max_matches=30)
    try:
        runner = RuleRunner(load_rules(), engine=engine)
        facts = _convert_facts()
        expected = [h.rule.id for h in runner.run(facts)]
        pids = set()
        for _ in range(60):
            assert [h.rule.id for h in runner.run(facts)] == expected
            pids.add(engine.stats.last_worker_pid)
        strata = len({r.stratum for r in runner.rules})
        assert len(pids) >= 61 * strata // 30
        assert engine.stats.worker_deaths == 0
    finally:
        engine.close()


def test_a_worn_worker_hands_over_to_a_standby_started_ahead():
    """The successor starts compiling at STANDBY_AT of the limits, so replacing a worker
    never makes a case wait for a fresh one; no standby is left running after close."""
    from qcdoctor.engine.matching.engine_process import STANDBY_AT
    engine = EngineProcess(max_matches=30)
    try:
        runner = RuleRunner(load_rules(), engine=engine)
        facts = _convert_facts()
        expected = [h.rule.id for h in runner.run(facts)]
        strata = len({r.stratum for r in runner.rules})    # a case makes one match each
        handed_over = 0
        for _ in range(3 * 30 // strata + 2):      # matches enough for two hand-overs at least
            standby = engine._standby
            assert [h.rule.id for h in runner.run(facts)] == expected
            if standby is not None and engine._standby is None:
                assert engine.worker_pid() == standby.process.pid      # it took over
                handed_over += 1
            if engine._standby is not None:         # started only once the worker wore
                assert engine._worker.matches >= 30 * STANDBY_AT
        assert handed_over >= 2 and engine.stats.worker_deaths == 0
        assert engine.stats.workers_started == handed_over + 1 + (engine._standby is not None)
    finally:
        engine.close()
    assert engine._worker is None and engine._standby is None


LINUX_PROC = pytest.mark.skipif(not os.path.exists("/proc/self/statm"),
                                reason="reads process memory and descriptors from /proc")


@LINUX_PROC
@pytest.mark.parametrize("caller_heap", ["small", "large and free"])
def test_a_worker_is_replaced_before_its_memory_passes_the_cap(caller_heap):
    """Engine states are never emptied (that path crashes): memory is bounded by replacing
    the worker once it has grown MAX_WORKER_GROWTH_MB past what it started with (what a
    forked worker inherits from a large caller does not count). A caller that has freed a
    large heap (a long test run, a notebook) hands the fork free memory it reuses without
    its resident size moving: the growth must show all the same. Run in a fresh
    interpreter: the heap this test run has left would change how often growth is read."""
    cap = 12
    done = subprocess.run([sys.executable, "-m", "tests.matching.growth_cap_scenario",
                           caller_heap, str(cap)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    growth = seen["growth"]
    assert seen["workers_started"] >= 3, growth
    # a successor starts smaller than the worker it replaced ended
    starts = [i for i in range(1, len(growth)) if growth[i] < growth[i - 1]]
    # past the cap by what a reading's step shows at most (read after each reply)
    steps = [growth[0]] + [growth[i] if i in starts else growth[i] - growth[i - 1]
                           for i in range(1, len(growth))]
    assert max(growth) < cap + max(steps), growth
    assert len(starts) >= 2 and all(growth[i] < cap for i in starts), growth


def test_a_worker_holds_no_pipe_of_its_caller():
    """A program the caller talks to through a pipe (a browser driver, a user's tool) ends
    when the caller closes its input, however many workers were forked meanwhile."""
    program = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                               stdin=subprocess.PIPE)
    engine = EngineProcess()
    try:
        runner = RuleRunner(load_rules(), engine=engine)
        assert runner.run(_convert_facts())                 # a worker, forked and serving
        program.stdin.close()
        assert program.wait(timeout=30) == 0                # its end of file came
        assert runner.run(_convert_facts())                 # and the worker still serves
    finally:
        program.kill()
        program.wait()
        engine.close()


def test_long_and_broken_strings_never_reach_the_engine():
    text = "x" * (20 * 2**20) + "\udc80"
    fact = engine_fact({"type": "stage", "stage": "qat", "metric": text})
    assert len(fact["metric"]) < MAX_ENGINE_STRING + 40
    assert "more characters" in fact["metric"] and "\udc80" not in fact["metric"]
    # a case file stops longer values and lone surrogates itself (collectors/limits.py);
    # what it lets through, longer than the engine takes, is cut before the engine
    case = json.loads(json.dumps(CONVERT))
    for stage in case["stages"].values():
        stage["metric"] = "mAP_" + "A" * (limits.TEXT_CHARS - 4)     # a direction from its name
    case["title"] = "t\u4e2d" * (limits.TEXT_CHARS // 2)
    assert limits.TEXT_CHARS > MAX_ENGINE_STRING
    report = triage_dict(case)
    assert report["conclusion"]["stage"] == "convert"
    case["title"] = "t\ud800"
    with pytest.raises(QcdoctorError, match="lone surrogate"):
        triage_dict(case)


def _fresh_reports() -> dict[str, str]:
    code = ("import json, sys\n"
            "from qcdoctor.collectors.case_file import load_case\n"
            "from qcdoctor.engine.commands.examples import example_names, example_path\n"
            "from qcdoctor.engine.reports.formats import render\n"
            "from qcdoctor.engine.diagnosis.triage import triage_case\n"
            "out = {}\n"
            "for name in example_names():\n"
            "    with example_path(name) as path:\n"
            "        r = triage_case(load_case(path), lang='en', environ={}, installed={}, cwd=path,"
            " display_path=name)\n"
            "    out[name] = render(r, 'json')\n"
            "print(json.dumps(out))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def test_a_failed_case_leaves_nothing_behind_for_the_next(monkeypatch):
    """After an engine failure in a long-running process, every bundled example's report is
    byte-identical to a fresh process's."""
    from qcdoctor.engine.diagnosis.diagnose import bundled_runner
    runner = bundled_runner()
    real = durable_host.QuietHost.match

    def fail_midway(self, name, facts, gate):
        real(self, name, facts, gate)                    # its facts are in the engine...
        raise RuntimeError("Could not retract fact, error code: 314")   # ...then it fails
    noisy = json.loads(json.dumps(CONVERT))
    noisy["symptom"] = "x" * 100
    from qcdoctor.engine.matching.engine_process import engine_process
    engine_process().close()                             # the next worker forks with the patch
    monkeypatch.setattr(durable_host.QuietHost, "match", fail_midway)
    with pytest.raises(EngineFailure):
        triage_dict(noisy)
    monkeypatch.undo()
    # no manual reset: the engine itself must not reuse the worker that failed
    assert engine_process().worker_pid() is None
    in_process = {}
    for name in example_names():
        with example_path(name) as path:
            report = triage_case(load_case(path), lang="en", environ={}, installed={}, cwd=path,
                                 display_path=name, runner=runner)
        in_process[name] = render(report, "json")
    assert in_process == _fresh_reports()


def test_the_cli_reports_an_engine_crash_as_a_clear_error(tmp_path):
    """No signal and no traceback reach the user: exit 2 with a message naming the case."""
    (tmp_path / "case.yaml").write_text("schema: qcdoctor/case-v1\nevidence: [dataset_eval]\n")
    code = ("import os, signal, sys\n"
            "from qcdoctor.engine.matching import durable_host\nfrom qcdoctor.engine.commands import cli\n"
            "durable_host.QuietHost.match = lambda *a: os.kill(os.getpid(), signal.SIGABRT)\n"
            "sys.exit(cli.main(['triage', sys.argv[1]]))\n")
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "rule engine failed" in result.stderr and "SIGABRT" in result.stderr
    assert str(tmp_path / "case.yaml") in result.stderr


def test_where_fork_is_missing_the_worker_is_spawned_and_answers_the_same():
    spawned = EngineProcess(start_method="spawn")
    try:
        runner = _st050(spawned)
        assert [h.rule.id for h in runner.run([TRANSITION])] == ["ST050"]
        assert spawned.worker_pid() not in (None, os.getpid())
    finally:
        spawned.close()


@LINUX_PROC
def test_a_workers_last_words_are_quoted_and_no_log_file_is_left(monkeypatch, tmp_path):
    """What a dying worker printed is in the death's reason, read from a file that was
    unlinked when the worker started: nothing stays in the temporary folder, whatever
    happens to either process."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))     # this test's own folder
    engine = EngineProcess()
    try:
        _last_words_and_no_log(engine, monkeypatch, tmp_path)
    finally:
        engine.close()


def _last_words_and_no_log(engine, monkeypatch, folder):
    runner = _st050(engine)
    runner.run([TRANSITION])
    log = os.readlink(f"/proc/{engine.worker_pid()}/fd/2")
    assert log.endswith("(deleted)") and "qcdoctor-engine-" in log

    def says_why_and_dies(self, name, facts, gate):
        os.write(2, b"C engine: out of slots for rule ST050\n")
        os.kill(os.getpid(), signal.SIGKILL)
    engine.close()                          # the next workers are forked with the patch
    monkeypatch.setattr(durable_host.QuietHost, "match", says_why_and_dies)
    with pytest.raises(EngineCrash) as crashed:
        runner.run([TRANSITION])
    assert "out of slots for rule ST050" in str(crashed.value)
    assert "SIGKILL" in str(crashed.value)
    assert list(folder.iterdir()) == []
