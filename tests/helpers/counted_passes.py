"""A pass that notes each time it is loaded, for the tests that count loads per process
(``tests/campaign/test_identity.py``, ``tests/cli/test_plugin.py``).

``Counted`` is a PassBase class, so each load builds one: its constructor appends the id of the
process that loaded it to the file ``$FXFUZZ_TEST_LOADS``. It raises a type that depends on the
graph, so that a campaign finds two buckets and writes a repro of each.
"""

import os

from torch.fx.passes.infra.pass_base import PassBase


class Counted(PassBase):
    def __init__(self):
        super().__init__()
        with open(os.environ["FXFUZZ_TEST_LOADS"], "a") as fh:
            fh.write(f"{os.getpid()}\n")

    def call(self, gm):
        raise (ValueError if len(gm.graph.nodes) % 2 else TypeError)("planted")
