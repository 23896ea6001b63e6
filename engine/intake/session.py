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

Numbers: a question's number is one more than the questions answered before it, in this
session or already in case.yaml (an earlier session, the user's own edits, values taken
from the files), so a resumed session goes on where the last one stopped; a question
asked again keeps its number. Defaults come with where they came from, shown under the
question before Enter can keep them: the case's value, the symptom line (only numbers it
ties to their stage, and the chip it names, engine/intake/symptom_hints.py), the compile
script, the march collected for the platform. A symptom whose numbers pair with its
stages more than one way is asked about before the stage results, with its parse shown
(engine/intake/symptom_question.py); one with no reading to choose shows its parse. The
stage table goes on to the stages the symptom names; an evidence answer of a stable bad
case answers the bad-case question. An NV12 height or width is checked as it is typed, by
the audit's own rule. The metric is written as soon as it is confirmed
(engine/intake/stage_metric.py).

Going back: ``<`` returns to the question before; the answered questions gone back over
are asked again, in order, once the one returned to is answered, each with its saved
answer as the default. Scripted answers whose questions never came up are named in one
warning at the end.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from qcdoctor.catalogues import question_topics
from qcdoctor.collectors.case_file import MARCH_CHIPS, parse_case
from qcdoctor.collectors.deploy_facts import nv12_side_even
from qcdoctor.collectors.deploy_script import UNKNOWN, preprocess_normalisation, read_script
from qcdoctor.collectors.environment import THIS_MACHINE
from qcdoctor.collectors.files import ArtifactRefused, CaseFiles
from qcdoctor.collectors.qa_files import run_for
from qcdoctor.engine.diagnosis.checklist_counts import failed_items, failure_texts
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.intake.case_writer import CaseDocument
from qcdoctor.engine.intake.deploy_known import (
    find_compile_scripts,
    known_answers,
    script_march,
    script_normalisation,
)
from qcdoctor.engine.intake.prompts import default_text
from qcdoctor.engine.intake.questions import (
    AnswerError,
    Question,
    all_question_keys,
    pending_topics,
    question_for_key,
    questions_for,
)
from qcdoctor.engine.intake.stage_metric import carry_metric, stage_entry, stage_given
from qcdoctor.engine.intake.symptom_hints import read_symptom
from qcdoctor.engine.intake.symptom_question import READING_KEY, ReadingAsked
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
# the board sizes an NV12 input needs even (collectors/deploy_facts.py nv12_side_even)
NV12_SIDES = {"deploy.board.height": "height", "deploy.board.width": "width"}
# an evidence answer that already says the bad case is stable answers the bad-case question
EVIDENCE_KEY, STABLE_BADCASE = "evidence", "reproducible_badcase"
BADCASE_KEY, BADCASE_AVAILABLE = "badcase", "available"


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
        # answered questions gone back over with <: asked again, in order, once the one
        # gone back to is answered (their saved answers as the defaults)
        self.forward: list[tuple[str, str]] = []
        self.symptom_asked = ReadingAsked(self.doc)     # an ambiguous symptom's question
        self.open_topic: str | None = None      # a table being filled in
        self.current_topic = ""
        self.numbers: dict[str, int] = {}       # key -> its number: a re-ask keeps it
        self.answered_before = self.answered_count()    # numbers go on from these
        self.asked = 0                          # prompts shown, re-asks included (a guard)
        self.guesses: dict[str, str] = {}       # QuantAnalysis folder -> guessed comparison
        self.guessed_from: dict[str, str] = {}  # QuantAnalysis folder -> how it was guessed
        self.step0_differs = False              # "not all the same": each check is asked
        self.last_report: dict | None = None    # the report the current question is asked on

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

    def answered_count(self) -> int:
        """How many questions case.yaml already answers: one per key a question writes
        that has its value (the step-0 summary question stands for its four checks, and is
        not counted besides them), and one comparison per analyses_run entry."""
        keys = [key for key in all_question_keys() if "{" not in key and key != STEP0_SUMMARY]
        count = sum(1 for key in keys
                    if (question := question_for_key(key)) is not None and self.answered(question))
        runs = self.doc.get("analyses_run")
        return count + (sum(1 for run in runs if isinstance(run, dict) and run.get("out_dir"))
                        if isinstance(runs, list) else 0)

    def topics(self, report: dict) -> list[str]:
        """What the rules want answered, then QuantAnalysis folders classified by a guess."""
        guessed = [f for f in report["facts"] if f["type"] == "qa_folder" and _comparison_guessed(f)]
        self.guesses = {f["analysis"]: f"{f['baseline']} vs {f['analysis_stage']}"
                        for f in guessed if f["baseline"] and f["analysis_stage"]}
        self.guessed_from = {f["analysis"]: f["known_from"] for f in guessed}
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
        if self.revisit is None and self.forward:
            self.revisit = self.forward.pop()
        if self.revisit:
            (topic, key), self.revisit = self.revisit, None
            found = [q for q in [self.symptom_asked.question()] if q] \
                if key == READING_KEY else \
                [q for q in questions_for(topic) if q.key == key] or \
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
                if question.type == "stage_result":
                    reading = self.symptom_asked.to_ask()
                    if reading is not None:         # which number is whose comes first
                        self.current_topic = READING_KEY
                        return reading
                    told = self.symptom_asked.parse_to_tell(self.lang)
                    if told:
                        self.prompter.say(told)
                return question
        self.open_topic = None
        return None

    def has_answer(self, question: Question) -> bool:
        """Whether ``question`` holds an answer to come back to after going back over it."""
        if question.key == READING_KEY:
            return self.symptom_asked.settled()
        return self.answered(question)

    def settled(self, question: Question, topic: str, report: dict) -> bool:
        """A stage result of the table that cannot move the stage any more: the stage is
        determined and this one comes after the first abnormal stage (knowledge.md §4:
        ask only what changes the next step). A rule that still wants it asks by name."""
        if question.type != "stage_result" or topic != "stage_results" or \
                not report["conclusion"].get("determined"):
            return False
        abnormal = [STAGES.index(f["stage"]) for f in report["facts"]
                    if f["type"] == "stage" and f["status"] == "abnormal"]
        return bool(abnormal) and STAGES.index(question.stage) > min(abnormal) and \
            not self.symptom_reaches(question.stage)

    def symptom_reaches(self, stage: str) -> bool:
        """The symptom names ``stage`` or a later one ("the board is bad"): the table goes
        on to it, so the stages the user spoke of are asked whatever the first drop."""
        named = read_symptom(str(self.doc.get("symptom") or "")).named
        return any(STAGES.index(s) >= STAGES.index(stage) for s in named)

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
        if question.key == READING_KEY:
            self.symptom_asked.store(value, self.metric)
        elif question.key == "stages.metric":
            self.metric = carry_metric(self.doc, self.metric, value)
        elif question.type == "stage_result":
            stage_entry(self.doc, question.stage, value, self.metric)
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
        elif question.key == EVIDENCE_KEY:
            self.doc.set(question.key, value)
            self.badcase_from_evidence(question, value)
        elif question.type == "path":
            if not (self.folder / value).is_file():
                raise AnswerError(f"{value} 不在案例目录中" if self.lang == "zh" else
                                  f"{value} is not a file in the case folder")
            self.doc.set(question.key, value)
        else:
            if question.key in NV12_SIDES:
                self.check_nv12_side(question.key, value)
            self.doc.set(question.key, value)
            if question.key in ("deploy.train.mean", "deploy.train.std"):
                self.carry_divisor()
        self.doc.save()

    def badcase_from_evidence(self, question: Question, evidence: list) -> None:
        """"A bad case that fails every time" answers the bad-case question too: it is
        written, with the answer it came from, and not asked again."""
        if STABLE_BADCASE not in evidence or self.doc.has(BADCASE_KEY):
            return
        badcase = question_for_key(BADCASE_KEY)
        said = question.choice_note(STABLE_BADCASE, self.lang)
        t = labels()[self.lang]["intake"]
        self.doc.set(BADCASE_KEY, BADCASE_AVAILABLE, comment=t["implied_source"].format(answer=said))
        self.prompter.say(t["implied"].format(question=badcase.prompt(self.lang),
                                              value=badcase.choice_note(BADCASE_AVAILABLE, self.lang),
                                              answer=said))

    def check_nv12_side(self, key: str, value) -> None:
        """An NV12 board input's height and width are even: refused as typed, by the rule
        the audit judges them with, where the collectors see an NV12 input (the board
        format, the script's insert_image_convert or the config's input_type_rt)."""
        if nv12_side_even(int(value)) or not any(
                f["type"] == "nv12_size" for f in self.report()["facts"]):
            return
        t = labels()[self.lang]["intake"]
        raise AnswerError(t["nv12_odd"].format(side=t["sides"][NV12_SIDES[key]], value=value))

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
        """The default offered (see ``default``)."""
        return self.default(question)[0]

    def default(self, question: Question) -> tuple[object, str]:
        """(the default offered, where it came from in the user's words): the case's value,
        else what the symptom, the compile script, the march collected for the platform or
        a QuantAnalysis folder's content suggests (confirmed with Enter); (None, '') when
        nothing does."""
        t = labels()[self.lang]["intake"]
        reading = read_symptom(str(self.doc.get("symptom") or ""))
        if question.key == "stages.metric":
            if self.metric:
                return self.metric, t["default_case"]
            return reading.metric, t["default_symptom"] if reading.metric else ""
        if question.type == "comparison":
            run = self._run_of(question.folder)
            if run is not None:
                return f"{run.get('baseline')} vs {run.get('analysis')}", t["default_case"]
            guess = self.guesses.get(question.folder)
            how = id_words(self.guessed_from.get(question.folder, "unknown"), self.lang)
            return guess, t["default_guess"].format(how=how) if guess else ""
        if question.key == READING_KEY:            # only an answer given before
            chosen = self.symptom_asked.default()
            return chosen, t["default_case"] if chosen else ""
        value = self.doc.get(question.key)
        if value is not None and not (question.type == "stage_result" and
                                      not stage_given(self.doc, question.stage)):
            return value, t["default_case"]
        if question.type == "stage_result":
            hinted = reading.values.get(question.stage)
            return (None, "") if hinted is None else ({"value": hinted}, t["default_symptom"])
        if question.key in ("deploy.train.mean", "deploy.train.std"):
            value = script_normalisation(self.folder, self.doc.get("deploy") or {},
                                         self.files).get(question.key.rsplit(".", 1)[1])
            where = self.script_normalisation().get("where", "")
            return (value, t["default_file"].format(where=where)) if value and where else \
                (value, "")
        if question.key == "platform.chip":
            return self.chip_default(question, reading.chip)
        return None, ""

    def chip_default(self, question: Question, said: str | None = None) -> tuple[str | None, str]:
        """The chip the symptom names (``said``), where no march was collected or it runs
        that march; else the chip of the march that was collected: the report's platform (a
        board file, the compile script or config case.yaml names), else the march the
        compile scripts in the folder state; the first of the chip question's choices that
        runs it (nash-p: J6P). (None, '') when neither is known."""
        platform = next((f for f in (self.last_report or {}).get("facts", [])
                         if f["type"] == "platform" and f["known"]), None)
        if platform is not None:
            march, where = platform["march"], platform["source"]
        else:
            march, where = script_march(self.folder, self.doc.get("deploy") or {},
                                        self.files) or (None, "")
        if said in question.choices and (not march or said in MARCH_CHIPS.get(march, ())):
            return said, labels()[self.lang]["intake"]["default_symptom"]
        chip = next((c for c in question.choices if c in MARCH_CHIPS.get(march or "", ())), None)
        if chip is None:
            return None, ""
        return chip, labels()[self.lang]["intake"]["default_march"].format(
            march=march, where=source_text(where, self.lang))

    # --- the loop -----------------------------------------------------------------
    def announce(self, report: dict) -> None:
        t = labels()[self.lang]["intake"]
        found = [f for f in report["facts"] if f.get("source") and not f["source"].startswith(
            ("case.yaml", "not given", "derived", "deploy rules", "rule ")) and
            f["type"] in ("platform", "version", "qa_folder", "graph_loaded", "deploy_script")]
        # a compile script in the folder that case.yaml does not name yet: read when the
        # deployment questions come, and said now (it is no "nothing to collect")
        scripts = [] if (self.doc.get("deploy") or {}).get("script") else \
            find_compile_scripts(self.folder, self.files)
        if not found and not scripts:
            self.prompter.say(t["none_found"])
            return
        self.prompter.say(t["found"])
        for script in scripts:
            self.prompter.say(f"  - {t['script_found'].format(script=script)}")
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
            self.last_report = report
            number = self.numbers.setdefault(question.key,
                                             self.answered_before + len(self.numbers) + 1)
            value, source = self.default(question)
            reply = self.prompter.ask(question, self.lang, value, str(number), source)
            entry = (self.current_topic, question.key)
            if reply.kind == "stop":
                stopped = True
                break
            if reply.kind == "skip":
                self.deferred.add(entry)
                self.history.append(entry)
                if question.key == READING_KEY:
                    self.symptom_asked.settle()
                continue
            if reply.kind == "back":
                if self.history:
                    if self.has_answer(question):   # walked through again on the way back
                        self.forward.append(entry)
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
        self.warn_unused()
        return report

    def warn_unused(self) -> None:
        """Scripted answers whose questions never came up: named in one warning, never
        dropped without a word."""
        unused = getattr(self.prompter, "unused", None)
        keys = unused() if unused else []
        if keys:
            self.prompter.warn(labels()[self.lang]["intake"]["answers_unused"].format(
                keys=", ".join(keys), file=getattr(self.prompter, "path", "")))

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
                out += self.skipped_rows(wanted.get(topic), questions, skipped)
                continue
            if questions and all(self.answered(q) for q in questions):
                if topic not in wanted:         # a follow-up, answered: nothing is open
                    continue
                answer = "; ".join(default_text(self.current(q)) or "-" for q in questions)
                reason = t["open_answered"].format(answer=answer, why=questions[0].why[self.lang])
            else:
                reason = t["open_unaskable"]
            out.append((what, reason))
        return out

    def skipped_rows(self, wanted: str | None, questions: list[Question],
                     skipped: list[Question]) -> list[tuple[str, str]]:
        """What a skip left open, each under the name of the question that was skipped: the
        rule's words with the skipped question they ask about (the one whose name they
        mention, or the topic's only one), else each skipped question on its own."""
        t = labels()[self.lang]["intake"]
        named = [q for q in skipped if wanted and q.key.rsplit(".", 1)[-1] in wanted]
        if wanted and (named or len(questions) == 1):
            return [(wanted, t["open_skipped"].format(question=(named or skipped)[0].prompt(
                self.lang)))]
        return [(q.prompt(self.lang), t["open_skipped_own"]) for q in skipped]

    def summary(self, report: dict) -> None:
        t = labels()[self.lang]["intake"]
        self.prompter.say("")
        self.prompter.say(t["saved"].format(path=self.doc.path))
        c = report["conclusion"]
        self.prompter.say(t["stage"].format(stage=CONCLUSION_LABELS[self.lang][c["stage"]]))
        if c["evidence"]:
            self.prompter.say(f"  {c['evidence'][0]['text']}")
        # counted as the audit and the batch summary count them (checklist_counts.py)
        failed = failed_items(report)
        if failed:
            self.prompter.say(t["failed"].format(count=len(failed)))
            colon = labels()[self.lang]["colon"]
            for item in failed:
                title = item.get("title") or id_words(item["id"], self.lang)
                first, *more = failure_texts(item) or [""]
                self.prompter.say(f"  - {title}{colon}{first}" if first else f"  - {title}")
                for text in more:
                    self.prompter.say(f"    {text}")
            fix = t["fix_one"] if len(failed) == 1 else t["fix_items"].format(count=len(failed))
            self.prompter.say(t["next"].format(text=fix))
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


def _comparison_guessed(fact: dict) -> bool:
    """A QuantAnalysis folder classified by a guess: by a word in its name, or by content
    other than two HBIR sides (float-vs-QAT-style op types do not tell calib.pt from
    qat.pt). A name stating its stage pair is no guess (knowledge.md §18 R5.8)."""
    from qcdoctor.collectors.quant_analysis import stage_pair_of_name
    if fact["known_from"] == "analyses_run" or (
            fact["known_from"] == "folder name" and stage_pair_of_name(fact["analysis"])):
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
