"""Where the tests find the checkout's files, wherever a test file sits below tests/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
# the specification and the tools' format samples, beside a checkout (absent in a clone)
SHARED = REPO.parent / "shared"
