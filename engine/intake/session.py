"""Guided intake: collect what can be found, then ask only what changes the next step.

Loop: run the rules on the case as it stands, take the first question of the topics they
report missing or ask for, ask it, save case.yaml atomically, run again - until nothing
the rules need is open or the user stops. A question is never asked while its key has a
value, so a second run resumes where the first stopped. Before a deployment question is
asked, the compile script and config are read for its answer; a stage result that can no
longer move the stage is not asked; a QuantAnalysis folder whose comparison is a guess is
asked about, with the guess as the default. The training mean/std taken from the script
bring its divisor along; the step-0 checks are asked when the report's first action is to
make them, so the intake never calls itself done while that step waits on them.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from qcdoctor.catalogues import question_topics
from qcdoctor.collectors.case_file import parse_case
from qcdoctor.collectors.deploy_script import UNKNOWN, preprocess_normalisation, read_script
from qcdoctor.collectors.environment import THIS_MACHINE
from qcdoctor.collectors.files import ArtifactRefused, CaseFiles
from qcdoctor.collectors.qa_files import run_for
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.intake.case_writer import CaseDocument
from qcdoctor.engine.intake.deploy_known import (
    find_compile_scripts,
    known_answers,
    script_normalisation,
)
from qcdoctor.engine.intake.prompts import default_text
from qcdoctor.engine.intake.questions import (
    AnswerError,
    Question,
    pending_topics,
    question_for_key,
    questions_for,
)
from qcdoctor.engine.intake.symptom_hints import stage_hints
from qcdoctor.errors import QcdoctorError
from qcdoctor.fact_types import STAGES, USER_CHECKS
from qcdoctor.vocabulary import CONCLUSION_LABELS, analysis_type
from qcdoctor.wording import id_words, labels, source_text

MAX_QUESTIONS = 200            # a guard against a rule set that keeps asking
REPORT_FILE = "qcdoctor-report.md"
DIVISOR_KEY = "deploy.train.divisor"
# the next action the step-0 answers decide (AN090): asked before the intake is done, first
# as one question (all the same?), each check on its own only when one differs
STEP0_ACTION = "user_side_checks"
STEP0_SUMMARY = "user_checks"
STEP0_KEYS = tuple(f"{STEP0_SUMMARY}.{check}" for check in USER_CHECKS)


class Intake:
    def __init__(self, folder: Path, prompter, lang: str = "zh", environ=None, installed=None,
                 strict: bool = False, allow_outside: tuple[Path, ...] = ()):
        self.folder = Path(folder)
        self.allow_outside = tuple(allow_outside)
        self.prompter = prompter
        self.lang = lang
        self.environ = environ
        self.installed = installed
        self.strict = strict                  # scripted answers: a bad one is an error
        self.doc = CaseDocument(self.folder)
        if not self.doc.has("language"):
            self.doc.set("language", lang)      # saved with the first answer: resume keeps it
        self.metric = self._known_metric()
        self.files = CaseFiles(self.folder, self.allow_outside)
        self.deferred: set[tuple[str, str]] = set()     # (topic, key): skipped this session
        self.history: list[tuple[str, str]] = []        # (topic, key) answered or skipped
        self.revisit: tuple[str, str] | None = None
        self.open_topic: str | None = None      # a table being filled in
        self.current_topic = ""
        self.numbers: dict[str, int] = {}       # key -> its number: a re-ask keeps it
        self.asked = 0                          # prompts shown, re-asks included (a guard)
        self.guesses: dict[str, str] = {}       # QuantAnalysis folder -> guessed comparison
        self.step0_differs = False              # "not all the same": each check is asked

    # --- the case as it stands ----------------------------------------------------
    def report(self) -> dict:
        case = parse_case(self.doc.text(), self.doc.path, self.folder)
        return triage_case(case, lang=self.lang, environ=self.environ,
                           installed=self.installed, cwd=self.folder,
                           case_files=CaseFiles(self.folder, self.allow_outside))

    def _known_metric(self) -> str | None:
        stages = self.doc.get("stages") or {}
        return next((v.get("metric") for v in stages.values()
                     if isinstance(v, dict) and v.get("metric")), None)

    def answered(self, question: Question) -> bool:
        if question.key == "stages.metric":
            return bool(self.metric)
        if question.type == "stage_result":
            entry = self.doc.get(question.key)
            return isinstance(entry, dict) and ("value" in entry or "status" in entry)
        if question.type == "comparison":
            return self._run_of(question.folder) is not None
        if question.key == STEP0_SUMMARY:
            return all(self.doc.has(key) for key in STEP0_KEYS)
        return self.doc.has(question.key)

    def _run_of(self, folder: str):
        """The analyses_run entry that names ``folder`` as its out_dir, or None."""
        return run_for(self.doc.get("analyses_run"), folder)

    def topics(self, report: dict) -> list[str]:
        """What the rules want answered, then QuantAnalysis folders classified by a guess."""
        guessed = [f for f in report["facts"] if f["type"] == "qa_folder" and _comparison_guessed(f)]
        self.guesses = {f["analysis"]: f"{f['baseline']} vs {f['analysis_stage']}"
                        for f in guessed if f["baseline"] and f["analysis_stage"]}
        return pending_topics(report) + [f"qa_comparison:{f['analysis']}" for f in guessed] \
            + self.step0_topic(report)

    def step0_topic(self, report: dict) -> list[str]:
        """The step-0 checks, while the report's first action is to make them and some are
        not answered: the intake is not done while the next step waits on them."""
        actions = report.get("next_actions") or []
        first = actions[0]["id"] if actions else None
        open_keys = [key for key in STEP0_KEYS if not self.doc.has(key)]
        if first != STEP0_ACTION or not open_keys:
            return []
        # some answered already, or one differs: ask the rest one by one
        each = self.step0_differs or len(open_keys) < len(STEP0_KEYS)
        return ["user_check_each" if each else "user_checks"]

    def next_question(self, report: dict) -> Question | None:
        if self.revisit:
            (topic, key), self.revisit = self.revisit, None
            found = [q for q in questions_for(topic) if q.key == key] or \
                [q for q in [question_for_key(key)] if q]
            if found:
                self.current_topic = topic
                return found[0]
        topics = self.topics(report)
        if self.open_topic:
            topics = [self.open_topic] + [t for t in topics if t != self.open_topic]
        for topic in topics:
            for question in questions_for(topic):
                # a skip holds for the topic it was asked in: a later follow-up that needs
                # the same key for its own reason asks once more
                if (topic, question.key) in self.deferred or self.answered(question) or \
                        self.settled(question, topic, report) or self.needless(question) or \
                        self.fill_known(question):
                    continue
                self.open_topic = topic if question_topics()[topic.split(":")[0]].get(
                    "complete") else None
                self.current_topic = topic
                return question
        self.open_topic = None
        return None

    def settled(self, question: Question, topic: str, report: dict) -> bool:
        """A stage result of the table that cannot move the stage any more: the stage is
        determined and this one comes after the first abnormal stage (knowledge.md §4:
        ask only what changes the next step). A rule that still wants it asks by name."""
        if question.type != "stage_result" or topic != "stage_results" or \
                not report["conclusion"].get("determined"):
            return False
        abnormal = [STAGES.index(f["stage"]) for f in report["facts"]
                    if f["type"] == "stage" and f["status"] == "abnormal"]
        return bool(abnormal) and STAGES.index(question.stage) > min(abnormal)

    def needless(self, question: Question) -> bool:
        """The training divisor is asked only where the mean/std need one (see divisor_open)."""
        return question.key == DIVISOR_KEY and not self.divisor_open()

    def divisor_open(self) -> bool:
        """mean/std say nothing of their divisor: taken from the compile script, which does
        not state its own, or written for x in [0, 1] (pixels divided by something first).
        Pixel-scale values (123.675) mean divisor 1, case.yaml's default."""
        mean, std = self.doc.get("deploy.train.mean"), self.doc.get("deploy.train.std")
        if not (_numbers(mean) and _numbers(std)):
            return False
        script = self.script_normalisation()
        if _same_values(mean, script.get("mean")) and _same_values(std, script.get("std")):
            return script.get("divisor", UNKNOWN) is UNKNOWN
        return all(abs(v) <= 1 for v in [*mean, *std])

    def script_normalisation(self) -> dict:
        """mean / std / divisor of the compile script's insert_image_preprocess, and its line."""
        script = (self.doc.get("deploy") or {}).get("script")
        if not script:
            return {}
        try:
            calls = read_script(self.files.check(self.folder / script, "script"))
        except (ArtifactRefused, QcdoctorError):
            return {}
        found = [c for c in calls if c.name == "insert_image_preprocess"]
        if not found:
            return {}
        return {**preprocess_normalisation(found[-1]),
                "where": f"{script}:{found[-1].line} {found[-1].name}"}

    def carry_divisor(self) -> None:
        """Training mean/std confirmed as the compile script's: its divisor comes with them
        (values for divisor 255 mean something else with case.yaml's default of 1)."""
        if self.doc.has(DIVISOR_KEY):
            return
        script = self.script_normalisation()
        divisor = script.get("divisor", UNKNOWN)
        if not isinstance(divisor, (int, float)) or isinstance(divisor, bool) or divisor <= 0:
            return
        if _same_values(self.doc.get("deploy.train.mean"), script.get("mean")) and \
                _same_values(self.doc.get("deploy.train.std"), script.get("std")):
            self.doc.set(DIVISOR_KEY, divisor, comment=f"{script['where']} (with its mean/std)")

    def fill_known(self, question: Question) -> bool:
        """Answer a deployment question from the case's own files (with where it was read);
        True when it was, so it is not asked."""
        if not question.key.startswith("deploy.") or \
                question.key in getattr(self.prompter, "answers", {}):    # scripted: theirs win
            return False
        if question.key == "deploy.script":
            scripts = find_compile_scripts(self.folder, self.files)
            if len(scripts) != 1:
                return False
            value, source = scripts[0], labels()[self.lang]["intake"]["found_script"]
        else:
            known = known_answers(self.folder, self.doc.get("deploy") or {}, self.files)
            if question.key not in known:
                return False
            value, source = known[question.key]
        self.doc.set(question.key, value, comment=source)
        self.doc.save()
        self.prompter.say(labels()[self.lang]["intake"]["known"].format(
            question=question.prompt(self.lang), value=value, source=source))
        return True

    # --- answers ------------------------------------------------------------------
    def store(self, question: Question, value) -> None:
        if question.key == "stages.metric":
            self.metric = value
            return
        if question.type == "stage_result":
            if "value" in value and self.metric:
                value = {"metric": self.metric, **value}
            self.doc.set(question.key, value)
        elif question.type == "comparison":
            baseline, _, analysis = str(value).partition(" vs ")
            entry = {"type": analysis_type(None, analysis), "baseline": baseline,
                     "analysis": analysis, "out_dir": question.folder}
            runs = self.doc.get("analyses_run")
            old = self._run_of(question.folder)
            if old is not None:                 # asked again after going back
                old.update(entry)
            elif isinstance(runs, list):
                self.doc.append("analyses_run", entry)
            else:
                self.doc.set("analyses_run", [entry])
        elif question.key == STEP0_SUMMARY:
            self.store_step0(value)
        elif question.type == "path":
            if not (self.folder / value).is_file():
                raise AnswerError(f"{value} 不在案例目录中" if self.lang == "zh" else
                                  f"{value} is not a file in the case folder")
            self.doc.set(question.key, value)
        else:
            self.doc.set(question.key, value)
            if question.key in ("deploy.train.mean", "deploy.train.std"):
                self.carry_divisor()
        self.doc.save()

    def store_step0(self, value: str) -> None:
        """All the same (yes) confirms every check; not checked (unknown) marks those not
        answered yet; one differs (no) writes nothing and asks each check next."""
        if value == "no":
            self.step0_differs = True
            return
        for key in STEP0_KEYS:
            if value == "yes" or not self.doc.has(key):
                self.doc.set(key, value)

    def current(self, question: Question):
        """The default offered: the case's value, else what the symptom, the compile script
        or a QuantAnalysis folder's content suggests (confirmed with Enter)."""
        if question.key == "stages.metric":
            return self.metric or stage_hints(str(self.doc.get("symptom") or ""))[1]
        if question.type == "comparison":
            run = self._run_of(question.folder)
            if run is not None:
                return f"{run.get('baseline')} vs {run.get('analysis')}"
            return self.guesses.get(question.folder)
        value = self.doc.get(question.key)
        if value is None and question.type == "stage_result":
            hinted = stage_hints(str(self.doc.get("symptom") or ""))[0].get(question.stage)
            return None if hinted is None else {"value": hinted}
        if value is None and question.key in ("deploy.train.mean", "deploy.train.std"):
            return script_normalisation(self.folder, self.doc.get("deploy") or {},
                                        self.files).get(question.key.rsplit(".", 1)[1])
        return value

    # --- the loop -----------------------------------------------------------------
    def announce(self, report: dict) -> None:
        t = labels()[self.lang]["intake"]
        found = [f for f in report["facts"] if f.get("source") and not f["source"].startswith(
            ("case.yaml", "not given", "derived", "deploy rules", "rule ")) and
            f["type"] in ("platform", "version", "qa_folder", "graph_loaded", "deploy_script")]
        if not found:
            self.prompter.say(t["none_found"])
            return
        self.prompter.say(t["found"])
        for fact in found:
            detail = {"platform": lambda f: f"{f['chip']} / {f['march']}",
                      "version": lambda f: f"{f['package']} {f['version']}",
                      "qa_folder": lambda f: f"QuantAnalysis {f['analysis']} ({f['comparison']})",
                      "graph_loaded": lambda f: f"fx_graph ({f['nodes']} nodes)",
                      "deploy_script": lambda f: "compile script"}[fact["type"]](fact)
            self.prompter.say(f"  - {detail}  [{source_text(fact['source'], self.lang)}]")

    def adopt(self, report: dict) -> None:
        """Write what was collected automatically, with where it came from, so the case
        folder is self-contained (knowledge.md §4 rev 2); case.yaml values are kept."""
        changed = False
        for fact in report["facts"]:
            source = fact.get("source", "")
            if fact["type"] == "platform" and fact["known"] and not self.doc.has("platform") \
                    and not source.startswith("case.yaml"):
                self.doc.set("platform.march", fact["march"], comment=source)
                changed = True
            if fact["type"] == "version" and fact["known"] and source.startswith(THIS_MACHINE) \
                    and not self.doc.has(f"versions.{fact['package']}"):
                self.doc.set(f"versions.{fact['package']}", fact["version"], comment=source)
                changed = True
        if changed:
            self.doc.save()

    def run(self) -> dict:
        report = self.report()
        self.announce(report)
        self.adopt(report)
        t = labels()[self.lang]["intake"]
        stopped = False
        while self.asked < MAX_QUESTIONS:
            question = self.next_question(report)
            if question is None:
                break
            self.asked += 1
            number = self.numbers.setdefault(question.key, len(self.numbers) + 1)
            reply = self.prompter.ask(question, self.lang, self.current(question), str(number))
            entry = (self.current_topic, question.key)
            if reply.kind == "stop":
                stopped = True
                break
            if reply.kind == "skip":
                self.deferred.add(entry)
                self.history.append(entry)
                continue
            if reply.kind == "back":
                if self.history:
                    self.revisit = self.history.pop()
                    self.deferred.discard(self.revisit)
                else:
                    self.prompter.say(t["first"])
                    self.revisit = entry
                continue
            try:
                self.store(question, question.parse(reply.text, self.lang))
            except AnswerError as exc:
                if self.strict:
                    raise QcdoctorError(f"answer {reply.text!r} for '{question.key}' is not "
                                        f"accepted: {exc}", file=str(getattr(self.prompter, "path", "")),
                                        key=question.key) from None
                self.prompter.say(t["invalid"].format(reason=exc))
                self.revisit = entry
                continue
            self.history.append(entry)
            report = self.report()
        if not self.doc.path.exists():         # nothing answered: still leave a case file
            self.doc.save()
        report = self.report()
        if stopped:
            self.prompter.say(t["stopped"].format(case=shlex.quote(str(self.folder)), lang=self.lang))
        else:
            self.closing(report)
        self.summary(report)
        return report

    def closing(self, report: dict) -> None:
        """Nothing is left to ask: say so, or say what stays open and why it was not asked."""
        t = labels()[self.lang]["intake"]
        still_open = self.still_open(report)
        if not still_open:
            undetermined = not report["conclusion"].get("determined")
            self.prompter.say(t["done_undetermined" if undetermined else "done"])
            return
        self.prompter.say(t["open"])
        for text, reason in still_open:
            self.prompter.say(f"  - {text}: {reason}")

    def still_open(self, report: dict) -> list[tuple[str, str]]:
        """(what, why it was not asked) for every topic the rules still want."""
        t = labels()[self.lang]["intake"]
        wanted = {m["id"]: m["question"] for m in report["missing"]}
        out = []
        for topic in self.topics(report):
            # a question this case does not need (a divisor pixel values imply) is left out
            questions = [q for q in questions_for(topic) if not self.needless(q)]
            skipped = [q for q in questions if (topic, q.key) in self.deferred]
            what = wanted.get(topic) or (questions[0].prompt(self.lang) if questions else topic)
            if skipped:
                reason = t["open_skipped"].format(question=skipped[0].prompt(self.lang))
            elif questions and all(self.answered(q) for q in questions):
                if topic not in wanted:         # a follow-up, answered: nothing is open
                    continue
                answer = "; ".join(default_text(self.current(q)) or "-" for q in questions)
                reason = t["open_answered"].format(answer=answer, why=questions[0].why[self.lang])
            else:
                reason = t["open_unaskable"]
            out.append((what, reason))
        return out

    def summary(self, report: dict) -> None:
        t = labels()[self.lang]["intake"]
        self.prompter.say("")
        self.prompter.say(t["saved"].format(path=self.doc.path))
        c = report["conclusion"]
        self.prompter.say(t["stage"].format(stage=CONCLUSION_LABELS[self.lang][c["stage"]]))
        if c["evidence"]:
            self.prompter.say(f"  {c['evidence'][0]['text']}")
        failed = failed_checks(report)
        if failed:
            self.prompter.say(t["failed"].format(count=len(failed)))
            for title, text in failed:
                self.prompter.say(f"  - {title}: {text}")
            self.prompter.say(t["next"].format(text=t["fix_items"].format(count=len(failed))))
        elif report["next_actions"]:
            self.prompter.say(t["next"].format(text=report["next_actions"][0]["text"]))
        written = self.write_report(report)
        if written:
            self.prompter.say(t["written"].format(path=written))
        self.prompter.say(t["report"].format(case=shlex.quote(str(self.folder)), lang=self.lang))

    def write_report(self, report: dict) -> Path | None:
        """qcdoctor-report.md in the case folder, unless a file of the user's has that name."""
        from qcdoctor.atomic import write_text_atomic
        from qcdoctor.engine.reports.formats import render
        path = self.folder / REPORT_FILE
        if os.path.lexists(path):
            # a symlink, FIFO or device with that name is not ours: never opened
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None
            with open(path, "rb") as handle:
                first = handle.readline(4096).decode("utf-8", errors="replace").rstrip("\n")
            if not any(first.startswith("# " + labels()[lang]["title"]) for lang in ("zh", "en")):
                return None                      # not ours: never overwritten
        write_text_atomic(path, render(report, "md"))
        return path


def failed_checks(report: dict) -> list[tuple[str, str]]:
    """(check, what failed) for every failed deployment check with its own evidence; a
    mandatory item failed only through a finer check is named by that check."""
    out = []
    for item in report.get("checklist", []):
        if item["status"] != "fail":
            continue
        for evidence in item["evidence"]:
            # a finer check's evidence shown on its mandatory item is named by that check
            if evidence["status"] == "fail" and not evidence.get("part"):
                out.append((item.get("title") or id_words(item["id"], report.get("language", "en")),
                            evidence["text"]))
    return out


def _comparison_guessed(fact: dict) -> bool:
    """A QuantAnalysis folder classified by a guess: by name, or by content other than two
    HBIR sides (float-vs-QAT-style op types do not tell calib.pt from qat.pt)."""
    if fact["known_from"] == "analyses_run":
        return False
    return not (fact["known_from"] == "content" and fact["comparison"] == "convert")


def _numbers(value) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)


def _same_values(answer, script) -> bool:
    """The training values are the script's (one value stands for every channel)."""
    if not (_numbers(answer) and _numbers(script)):
        return False
    if len(answer) != len(script):
        if 1 not in (len(answer), len(script)):
            return False
        width = max(len(answer), len(script))
        answer, script = answer * (width // len(answer)), script * (width // len(script))
    return all(abs(a - b) <= 1e-6 * max(1.0, abs(b)) for a, b in zip(answer, script, strict=True))
