"""Reading a program's terminal the way a person does: wherever the lines break.

A program that wraps its text to the terminal's width breaks a line at any space, and
inside a word longer than a line (a temporary path holds the user's name and pytest's run
counter, so its length changes from machine to machine). A test that waits for a phrase
must find it whichever way it was wrapped, or it passes on one machine and fails on the
next. ``TerminalSession.expect_exact`` therefore matches its text with a line break
(and the indent after it) allowed between any two characters, and a space matched by any
run of white space; ``shows`` answers the same question for text already read.
"""

from __future__ import annotations

import re

import pexpect

_BREAK = r"(?:[ \t]*\r?\n[ \t]*)?"
_SPACE = r"(?:[ \t]+|[ \t]*\r?\n[ \t]*)"


def wrapped(text: str) -> re.Pattern:
    """``text`` as a pattern that also matches it wrapped at any width."""
    parts = []
    for char in text:
        if char.isspace():
            if parts and parts[-1] in (_SPACE, _BREAK):
                parts[-1] = _SPACE
            else:
                parts.append(_SPACE)
        else:
            if parts and parts[-1] not in (_SPACE, _BREAK):
                parts.append(_BREAK)
            parts.append(re.escape(char))
    return re.compile("".join(parts))


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def shows(output: str, text: str) -> bool:
    """Whether ``output`` holds ``text``, however it was wrapped (white space ignored on
    both sides: a negative check so made cannot pass because of a line break)."""
    return _squeezed(text) in _squeezed(output)


class TerminalSession(pexpect.spawn):
    """A program on a pseudo-terminal whose expected text may be wrapped anywhere."""

    def expect_exact(self, pattern_list, timeout=-1, searchwindowsize=-1, async_=False,
                     **kw):
        patterns = pattern_list if isinstance(pattern_list, list) else [pattern_list]
        converted = [wrapped(p) if isinstance(p, str) else p for p in patterns]
        return self.expect(converted if isinstance(pattern_list, list) else converted[0],
                           timeout=timeout, searchwindowsize=searchwindowsize,
                           async_=async_, **kw)
