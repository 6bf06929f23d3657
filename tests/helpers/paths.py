"""Where the suite's files are, for a test module in any folder of tests/."""

import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
HELPERS = os.path.join(TESTS, "helpers")
DATA = os.path.join(TESTS, "data")
