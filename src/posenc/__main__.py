"""``python -m posenc``: the ``posenc`` command."""

import sys

from .app.cli import main

sys.exit(main())
