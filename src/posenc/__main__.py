"""``python -m posenc``: the ``posenc`` command."""

import sys

from posenc.app.cli import main

sys.exit(main())
