"""``python -m stoker``: the stoker command line (see :mod:`stoker.cli`)."""

import sys

from stoker.cli import main

sys.exit(main())
