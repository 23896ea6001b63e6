"""``python -m qcdoctor``, for development; everyday use is the ``qcdoctor`` script.

``python -m`` puts the working directory first on sys.path, so run inside a case folder
someone sent, its ``yaml.py`` or ``jinja2.py`` would be imported in place of the real
packages. The working directory is dropped before anything else is imported.
"""

import os
import sys

if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from qcdoctor.engine.commands.cli import entry  # noqa: E402 - after the sys.path fix

entry()
