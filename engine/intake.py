"""Guided intake: collect what can be found, then ask only what changes the next step.

Loop: run the rules on the case as it stands, take the first question of the topics they
report missing or ask for, ask it, save case.yaml atomically, run again - until nothing
the rules need is open or the user stops. A question is never asked while its key has a
value, so a second run resumes where the first stopped.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from qcdoctor.collectors.case_file import parse_case
from qcdoctor.collectors.environment import THIS_MACHINE
from qcdoctor.collectors.files import CaseFiles

from .case_document import CaseDocument
from .errors import QcdoctorError
from .questions import AnswerError, Question, pending_topics, questions_for
from .report import labels, source_text
from .rulebook import question_topics
from .triage import triage_case
from .vocabulary import CONCLUSION_LABELS

MAX_QUESTIONS = 200            # a guard against a rule set that keeps asking
REPORT_FILE = "qcdoctor-report.md"


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
        self.metric = self._known_metric()
        self.deferred: set[tuple[str, str]] = set()     # (topic, key): skipped this session
        self.history: list[str] = []
        self.revisit: str | None = None
        self.open_topic: str | None = None      # a table being filled in
        self.current_topic = ""
        self.asked = 0

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
        return self.doc.has(question.key)

    def next_question(self, report: dict) -> Question | None:
        if self.revisit:
            key, self.revisit = self.revisit, None
            for topic in pending_topics(report) + [key.split(".")[0]]:
                found = [q for q in questions_for(topic) if q.key == key]
                if found:
                    self.current_topic = topic
                    return found[0]
        topics = pending_topics(report)
        if self.open_topic:
            topics = [self.open_topic] + [t for t in topics if t != self.open_topic]
        for topic in topics:
            for question in questions_for(topic):
                # a skip holds for the topic it was asked in: a later follow-up that needs
                # the same key for its own reason asks once more
                if (topic, question.key) not in self.deferred and not self.answered(question):
                    self.open_topic = topic if question_topics()[topic.split(":")[0]].get(
                        "complete") else None
                    self.current_topic = topic
                    return question
        self.open_topic = None
        return None

    # --- answers ------------------------------------------------------------------
    def store(self, question: Question, value) -> None:
        if question.key == "stages.metric":
            self.metric = value
            return
        if question.type == "stage_result":
            if "value" in value and self.metric:
                value = {"metric": self.metric, **value}
            self.doc.set(question.key, value)
        elif question.type == "path":
            if not (self.folder / value).is_file():
                raise AnswerError(f"{value} 不在案例目录中" if self.lang == "zh" else
                                  f"{value} is not a file in the case folder")
            self.doc.set(question.key, value)
        else:
            self.doc.set(question.key, value)
        self.doc.save()

    def current(self, question: Question):
        if question.key == "stages.metric":
            return self.metric
        return self.doc.get(question.key)

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
        while self.asked < MAX_QUESTIONS:
            question = self.next_question(report)
            if question is None:
                self.prompter.say(labels()[self.lang]["intake"]["done"])
                break
            self.asked += 1
            reply = self.prompter.ask(question, self.lang, self.current(question), str(self.asked))
            if reply.kind == "stop":
                self.prompter.say(labels()[self.lang]["intake"]["stopped"].format(case=self.folder))
                break
            if reply.kind == "skip":
                self.deferred.add((self.current_topic, question.key))
                continue
            if reply.kind == "back":
                if self.history:
                    self.revisit = self.history.pop()
                else:
                    self.revisit = question.key
                continue
            try:
                self.store(question, question.parse(reply.text, self.lang))
            except AnswerError as exc:
                if self.strict:
                    raise QcdoctorError(f"answer {reply.text!r} for '{question.key}' is not "
                                        f"accepted: {exc}", file=str(getattr(self.prompter, "path", "")),
                                        key=question.key) from None
                self.prompter.say(labels()[self.lang]["intake"]["invalid"].format(reason=exc))
                self.revisit = question.key
                continue
            self.history.append(question.key)
            report = self.report()
        if not self.doc.path.exists():         # nothing answered: still leave a case file
            self.doc.save()
        report = self.report()
        self.summary(report)
        return report

    def summary(self, report: dict) -> None:
        t = labels()[self.lang]["intake"]
        self.prompter.say("")
        self.prompter.say(t["saved"].format(path=self.doc.path))
        c = report["conclusion"]
        self.prompter.say(t["stage"].format(stage=CONCLUSION_LABELS[self.lang][c["stage"]]))
        if c["evidence"]:
            self.prompter.say(f"  {c['evidence'][0]['text']}")
        if report["next_actions"]:
            self.prompter.say(t["next"].format(text=report["next_actions"][0]["text"]))
        written = self.write_report(report)
        if written:
            self.prompter.say(t["written"].format(path=written))
        self.prompter.say(t["report"].format(case=self.folder))

    def write_report(self, report: dict) -> Path | None:
        """qcdoctor-report.md in the case folder, unless a file of the user's has that name."""
        from .atomic import write_text_atomic
        from .report import render
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
