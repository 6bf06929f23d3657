"""Where a campaign's examples are kept: how an example becomes bytes for the Hypothesis example
database and back (``Codec``: graph cases' ``GRAPH_CASES``, programs' ``PROGRAMS``, each
checked on the way in as untrusted data), how it crosses between a worker process and its
supervisor (``ExampleForm``), and the store of each bucket's smallest failing example
(``SavedFailures``) under its pass's key (``database_key``). The engine, the supervisor and
the levels all keep examples through this one module.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fxfuzz.campaign.results import Size
from fxfuzz.core.deadline import load_within
from fxfuzz.core.errors import SerializeError, UntrustedError
from fxfuzz.core.identity import identity_of, store_key
from fxfuzz.core.passes import Pass, PassFn
from fxfuzz.core.program import _TYPES, PROGRAM_OPS, SIZE_OPS, Program, from_data, module_source, to_data
from fxfuzz.core.serialize import (
    MAX_ELEMENTS,
    case_from_dict,
    case_to_dict,
    check_json_bounds,
    count_compute_nodes,
    json_data,
)
from fxfuzz.core.settings import CampaignSettings
from fxfuzz.strategies.programs import UPDATE_METHODS
from hypothesis.database import ExampleDatabase


def database_key(pass_fn: PassFn, domain: str) -> bytes:
    """Where a campaign's examples live in the database: one entry per pass and domain, so a
    failure replays first on the next campaign against the same pass."""
    if isinstance(pass_fn, Pass):
        return identity_of(pass_fn).database_key(domain)
    name = f"{getattr(pass_fn, '__module__', '')}:{getattr(pass_fn, '__qualname__', repr(pass_fn))}"
    return store_key(name, domain)


@dataclass(frozen=True)
class Codec:
    """Turns an example into bytes for the database and back (None: cannot be saved)."""

    dumps: Callable[[Any], bytes | None]
    loads: Callable[[bytes], Any]
    level: str = "graph"  # the kind of example it holds (``Sample.level``)


def _graph_case_dumps(case: Any) -> bytes | None:
    try:
        return json.dumps(case_to_dict(case)).encode()
    except (SerializeError, AttributeError):
        return None


def _graph_case_loads(raw: bytes) -> Any:
    return case_from_dict(json_data(raw))


GRAPH_CASES = Codec(_graph_case_dumps, _graph_case_loads)


@dataclass(frozen=True)
class ExampleForm:
    """How one level's examples cross between a worker process and its supervisor: as JSON
    data (``to_data``; None: this one cannot be) and back, their size (compute nodes) read from
    that data, and the codec the database keeps them in (whose ``level`` says which kind of
    example they are)."""

    to_data: Callable[[Any], dict[str, Any] | None]
    from_data: Callable[[dict[str, Any]], Any]
    nodes: Callable[[dict[str, Any]], int]
    codec: Codec


def _graph_case_data(case: Any) -> dict[str, Any] | None:
    try:
        return case_to_dict(case)
    except Exception:  # an example type the serializer does not know: fuzz on, unsaved
        return None


GRAPH_FORM = ExampleForm(_graph_case_data, case_from_dict, lambda data: count_compute_nodes(data["graph"]), GRAPH_CASES)


class SavedFailures:
    """Each bucket's smallest example, kept in the Hypothesis example database under one key
    per pass and domain, so the next campaign replays them before generating anything.

    Hypothesis's own replay of choice sequences does not fit rounds: a later round replays
    an already-minimized failure, sees it "pass" (the round ignores known buckets) and
    deletes it. Storing the serialized example makes replay independent of the strategy's
    choice sequence, and any ExampleDatabase (directory, GitHubArtifactDatabase,
    MultiplexedDatabase) carries it.

    Several processes save into one database (workers, restarts, the supervisor, later
    campaigns), each knowing only what it saved or replayed itself; so a store deletes an
    example only for a smaller one of the same bucket, or when it no longer fails. The
    database thereby only ever improves a bucket's example.
    """

    def __init__(self, database: ExampleDatabase, key: bytes, codec: Codec) -> None:
        self.db, self.key, self.codec = database, key + b".fxfuzz-failures", codec
        # bucket -> its smallest example (raw) and that example's Size
        self.by_bucket: dict[str, tuple[Size, bytes]] = {}

    def saved(self, timeout_s: float = CampaignSettings.example_timeout_s) -> list[tuple[bytes, Any]]:
        """The saved examples that load, each within ``timeout_s``, smallest first (by ``Size``). One that asks for code this run does not trust, or does not load
        (written by another fxfuzz or torch version, malformed, or too slow), is left out and
        kept in the database: counted in ``skipped`` (``skipped_untrusted``, ``unloadable``)
        with a line in ``notes``."""
        loaded = []
        self.skipped: Counter = Counter()
        self.notes: list[str] = []
        for raw in self.db.fetch(self.key):
            try:
                case = load_within(timeout_s, self.codec.loads, raw)
            except Exception as e:  # any exception: the entry is data written by anyone, never lost for it
                kind = "skipped_untrusted" if isinstance(e, UntrustedError) else "unloadable"
                self.skipped[kind] += 1
                why = str(e).splitlines()[0][:500] if str(e) else type(e).__name__
                entry = hashlib.sha1(raw).hexdigest()[:12]  # tells entries with the same complaint apart
                self.notes.append(f"left saved example {entry} in the database, not replayed ({kind}): {why}")
                continue
            loaded.append((Size.of(case.compute_nodes(), raw), raw, case))
        return [(raw, case) for _, raw, case in sorted(loaded, key=lambda loaded: loaded[0])]

    def keep(self, bid: str, raw: bytes | None, nodes: int) -> None:
        """Save ``raw`` (``nodes`` compute nodes) as bucket ``bid``'s example if it is smaller
        than the one this store holds for it, deleting that one."""
        if raw is None:
            return
        new = Size.of(nodes, raw)
        old = self.by_bucket.get(bid)
        if old is not None and not new < old[0]:
            return
        self.by_bucket[bid] = (new, raw)
        self.db.save(self.key, raw)
        if old is not None:
            self.drop_unless_held(old[1])

    def drop_unless_held(self, raw: bytes) -> None:
        """Delete ``raw`` unless it is the smallest example of some bucket held here."""
        if all(raw != held for _, held in self.by_bucket.values()):
            self.db.delete(self.key, raw)


def _program_dumps(program: Any) -> bytes:
    return json.dumps(to_data(program)).encode()


# A program is rendered to Python source and run, so a saved one is checked field by field
# first: every string pasted into the source is a name of the program (a local, ``self.<name>``)
# or a number, never one of Python's builtins or the source's own globals; the choices below
# come from their tables; sizes are bounded. Nothing else can reach the source.
_PROGRAM_NAME = re.compile(r"(?:self\.)?(?!__)[A-Za-z_][A-Za-z0-9_]{0,63}|-?[0-9]{1,6}(?:\.[0-9]{1,6})?")
_RESERVED_NAMES = frozenset(dir(builtins)) | {"torch", "nn", "_t", "self", "n"}
_PROGRAM_CHOICES: dict[str, frozenset[Any]] = {
    "op": frozenset(PROGRAM_OPS) | frozenset(SIZE_OPS),
    "ctx": frozenset({"no_grad", "enable_grad", "set_grad_enabled"}),
    "decorator": frozenset({None, "no_grad", "enable_grad"}),
    "kind": frozenset({"param", "buffer", "const"}),
    "method": frozenset(UPDATE_METHODS),
    "type": frozenset(_TYPES),
}
_OUTPUT_KINDS = {"var": 2, "none": 1, "const": 2, "dict": 2}
_MAX_DIM = 4096


def _program_name(v: Any) -> None:
    if not isinstance(v, str) or not _PROGRAM_NAME.fullmatch(v) or v.removeprefix("self.") in _RESERVED_NAMES:
        raise UntrustedError(
            f"a saved program holds {str(v)[:80]!r} where a name of the program belongs (a local or self.<name>)"
        )


def _check_output(item: Any) -> None:
    if not isinstance(item, list) or not item or _OUTPUT_KINDS.get(item[0]) != len(item):
        raise SerializeError(f"a saved program's output {str(item)[:80]} is not (var|none|const|dict, ...)")
    if item[0] == "var":
        _program_name(item[1])
    elif item[0] == "const" and type(item[1]) is not int:
        raise SerializeError("a saved program's constant output is an integer")
    elif item[0] == "dict":
        for pair in item[1] if isinstance(item[1], list) else [None]:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and len(pair[0]) < 100):
                raise SerializeError("a saved program's dict output is a list of [key, name]")
            _program_name(pair[1])


def check_program_data(d: Any) -> None:
    """SerializeError unless ``d`` (``to_data`` of a Program, from a database) holds only what a
    generated program holds: see ``_PROGRAM_NAME`` and ``_PROGRAM_CHOICES``."""
    check_json_bounds(d)
    pending = [("", d)]
    while pending:
        key, v = pending.pop()
        if key in _PROGRAM_CHOICES:
            if not (v is None or isinstance(v, str)) or v not in _PROGRAM_CHOICES[key]:
                raise SerializeError(
                    f"a saved program's {key} {str(v)[:80]!r} is not one of {sorted(map(str, _PROGRAM_CHOICES[key]))}"
                )
        elif key == "outputs":
            for item in v if isinstance(v, list) else [None]:
                _check_output(item)
        elif key in ("features", "domain"):
            if not isinstance(v, (dict, str)):
                raise SerializeError(f"a saved program's {key} is malformed")
        elif isinstance(v, dict):
            pending.extend(v.items())
        elif isinstance(v, list):
            pending.extend((key, x) for x in v)
        elif isinstance(v, str):
            _program_name(v)
        elif type(v) is int and abs(v) > 2**31:
            raise SerializeError(f"a saved program's {key} {v} is out of bounds")
        elif v is not None and not isinstance(v, (bool, int)):
            raise SerializeError(f"a saved program's {key} holds a {type(v).__name__}")


def _program_loads(raw: bytes) -> Any:
    data = json_data(raw)
    try:
        check_program_data(data)
        program = from_data(data)
        if not isinstance(program, Program) or not all(type(n) is int and 1 <= n <= _MAX_DIM for n in program.shape):
            raise SerializeError("not a saved program (a Program with sizes of 1 to 4096)")
        largest = max([*program.shape[:1], program.dim_max or 0, *program.other_sizes()], default=1)
        if math.prod(program.shape[1:]) * largest > MAX_ELEMENTS or len(program.shape) > 8:
            raise SerializeError(f"a saved program's inputs exceed {MAX_ELEMENTS} elements")
        ast.parse(module_source(program))
    except SerializeError:
        raise
    except Exception as e:  # the data's shape made checking or rendering fail: malformed, one line
        raise SerializeError(f"malformed saved program: {type(e).__name__}: {str(e)[:200]}") from None
    return program


# How a program-level failure is kept in the example database, to replay first next time.
PROGRAMS = Codec(_program_dumps, _program_loads, "program")


def _program_from_data(data: dict[str, Any]) -> Program:
    return _program_loads(json.dumps(data).encode())


# How a program crosses between a worker and the supervisor (checked as a saved one is).
PROGRAM_FORM = ExampleForm(to_data, _program_from_data, lambda data: from_data(data).compute_nodes(), PROGRAMS)
