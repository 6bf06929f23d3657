"""Shard splits ``K/N``: shard K (1-based) of a campaign split into N, as ``fxfuzz run
--shard`` takes them and ``report.json`` records them (``"shard": "K/N"``)."""

from __future__ import annotations

import re
import reprlib

from fxfuzz.core.errors import UsageError

# More shards than any CI matrix runs (GitHub allows 256 jobs per matrix), few enough that
# ``fxfuzz merge`` can list the missing ones of a split at once.
MAX_SHARDS = 1024
# Digits bounded before int(): a split is read from hand-edited report files too.
_SPLIT = re.compile(r"([0-9]{1,30})/([0-9]{1,30})")


def parse_shard(text: str) -> tuple[int, int]:
    """``K/N`` as ``(K, N)``; UsageError unless 1 <= K <= N <= MAX_SHARDS."""
    m = _SPLIT.fullmatch(text)
    k, n = (int(m[1]), int(m[2])) if m else (0, 0)
    if not 1 <= k <= n:
        raise UsageError(f"expected K/N with 1 <= K <= N, got {reprlib.repr(text)}")
    if n > MAX_SHARDS:
        raise UsageError(f"a split into {n} shards is more than fxfuzz takes ({MAX_SHARDS})")
    return k, n
