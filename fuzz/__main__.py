"""``python -m fxfuzz``: the ``fxfuzz`` command."""

import sys

from fxfuzz.cli import main

sys.exit(main())
