"""The terminal tests' reading finds a phrase however the program wrapped it, and only it."""

from __future__ import annotations

import pytest

from qcdoctor.engine.reports.termtext import wrap
from tests.terminal import shows, wrapped

SAID = ("Your answers are saved; run `qcdoctor intake /tmp/{long}/pytest-of-someone/"
        "pytest-12/test_interrupted_session0/resume --lang en` to answer the rest later.")
PHRASES = ("--lang en` to answer the rest later.", "Your answers are saved; run `qcdoctor intake",
           "pytest-of-someone/pytest-12/test_interrupted_session0/resume --lang en")


@pytest.mark.parametrize("path_length", [1, 37, 80, 160])
def test_a_phrase_is_found_at_every_width_and_path_length(path_length):
    text = SAID.format(long="x" * path_length)
    for width in range(12, 200):
        shown = "\r\n".join("  " + line for line in wrap(text, width))
        for phrase in PHRASES:
            assert wrapped(phrase).search(shown), (width, phrase)
            assert shows(shown, phrase)


def test_other_text_is_not_found():
    shown = "\r\n".join(wrap(SAID.format(long="abc"), 30))
    for other in ("--lang zh` to answer", "answer the rest now", "intake /tmp/abd"):
        assert not wrapped(other).search(shown) and not shows(shown, other)
