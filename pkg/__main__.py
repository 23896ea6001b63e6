import sys

from qcdoctor.engine.cli import main

sys.exit(main())
