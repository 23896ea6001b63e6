"""Errors that reach the user as one clear message (file, place, problem, fix)."""

from __future__ import annotations

# the command's exit codes: clean, a finding at or above --fail-on, an error
EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
# a bad value can be megabytes long: a message shows its start and end, never all of it
MAX_PART = 300
MAX_FIX = 600


def shorten(text: str, limit: int = MAX_PART) -> str:
    """``text`` cut in the middle to about ``limit`` characters, saying how much was left out."""
    if isinstance(text, str) and len(text) <= limit:
        return text                     # as given: a reader's reason keeps its Chinese
    text = str(text)
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]} … [{len(text) - head - tail} characters left out] … {text[-tail:]}"


class QcdoctorError(Exception):
    """Bad input or usage: printed without a traceback, exit code 2."""

    def __init__(self, problem: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None, fix: str | None = None):
        self.problem = shorten(problem)
        self.path = file                # whole, for a reader that shows it relative
        self.file = shorten(file) if file else file
        self.line = line
        self.key = shorten(key) if key else key
        # a fix is our own wording (a list of the keys allowed, say): kept whole up to a
        # longer limit than the parts that can hold a user's text
        self.fix = shorten(fix, MAX_FIX) if fix else fix
        self.problems: list[QcdoctorError] = [self]     # every problem of the file, in order
        self.limit = len(self.problems)                 # how many of them the message lists
        super().__init__(self.render())

    @classmethod
    def together(cls, problems: list[QcdoctorError], limit: int = 20) -> QcdoctorError:
        """The problems of one file as one error, listed in the order found (a linter's way:
        one run shows them all); the first one's file, line and key are the error's own."""
        if len(problems) == 1:
            return problems[0]
        first = problems[0]
        error = cls(first.problem, file=first.file, line=first.line, key=first.key,
                    fix=first.fix)
        error.problems = [error, *problems[1:]]
        error.limit = limit
        error.args = (error.render(),)
        return error

    def inside_bundle(self, folder, bundle) -> QcdoctorError:
        """This error with a file extracted from ``bundle`` into ``folder`` (gone once the
        run ends) named as the member of the bundle the user has: 'b.tar.gz: case/x:3'."""
        import os
        root = os.path.dirname(os.path.abspath(folder))
        if self.file and os.path.abspath(self.file).startswith(root + os.sep):
            member = os.path.relpath(os.path.abspath(self.file), root).replace(os.sep, "/")
            if self.line:
                member += f":{self.line}"
            self.file, self.line = f"{bundle}: {member}", None
        for problem in self.problems[1:]:
            problem.inside_bundle(folder, bundle)
        self.args = (self.render(),)
        return self

    def render(self) -> str:
        """The message as shown; several problems: a count, then each on its lines."""
        if len(self.problems) <= 1:
            return self._render_one()
        from qcdoctor.safe_text import visible
        shown = self.problems[:self.limit]
        head = f"{visible(self.file, lines=False)}: " if self.file else ""
        lines = [f"{head}{len(self.problems)} problems:"]
        for problem in shown:
            lines.append("- " + problem._render_one().replace("\n", "\n  "))
        if len(shown) < len(self.problems):
            lines.append(f"- ... and {len(self.problems) - len(shown)} more (fix these and run "
                         "again)")
        return "\n".join(lines)

    def _render_one(self) -> str:
        """The message as shown: every part made visible (a key of case.yaml may hold an
        ESC sequence; common/safe_text.py), the file and key on their line."""
        from qcdoctor.safe_text import visible
        where = ""
        if self.file:
            where = visible(self.file, lines=False)
            if self.line:
                where += f":{self.line}"
            where += ": "
        key = f"'{visible(self.key, lines=False)}': " if self.key else ""
        text = f"{where}{key}{visible(self.problem)}"
        if self.fix:
            text += f"\n  fix: {visible(self.fix)}"
        return text


class RuleError(QcdoctorError):
    """A rule file does not follow the rule format (a packaging or authoring bug)."""
