"""What the supervisor and its worker processes tell each other, as plain data both sides import.

A worker's start (``WorkerStart``) goes through a file only its user can read, in a private
temporary folder, which the worker deletes once read: neither the kernel's limit on a command
line (a ``--known`` file of many ids, a long example to run again) nor ``ps`` (a Redis
password) sees it. Messages then flow over the pipe the worker was handed: from the worker,
one of ``WorkerMessage``; from the supervisor, only ``Stop``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fxfuzz.core.settings import CampaignSettings

if TYPE_CHECKING:  # a worker reads its start before it imports torch (coverage starts first)
    from fxfuzz.campaign.results import Bucket


@dataclass(frozen=True)
class Task:
    """What each worker judges, when not generated examples under ``verify``: ``check``, a
    ``pkg.module:factory`` whose ``factory(blame=..., **check_args)`` returns the ExampleCheck to
    judge with (the gate's candidate-vs-baseline judgement); ``examples``, a
    ``pkg.module:factory`` whose ``factory(**examples_args)`` returns named examples to judge
    once each, in order, instead of generated ones (meant for one worker: each judges them all);
    ``strategy``, a ``pkg.module:factory`` whose ``factory(settings=..., **strategy_args)``
    returns the Hypothesis strategy generated examples are drawn from (None: the campaign's
    own, for the pass under test); ``form``, a ``pkg.module:attr`` naming the
    ``fxfuzz.campaign.store.ExampleForm`` of the examples (None: graph cases, ``GRAPH_FORM``)."""

    check: str | None = None
    check_args: dict[str, Any] = field(default_factory=dict)
    examples: str | None = None
    examples_args: dict[str, Any] = field(default_factory=dict)
    strategy: str | None = None
    strategy_args: dict[str, Any] = field(default_factory=dict)
    form: str | None = None


@dataclass(frozen=True)
class WorkerStart:
    """Everything one worker process needs; ``settings`` are this worker's (its seed, its share
    of the examples, whether it replays the saved failures; the pass under test, its
    ``identity``)."""

    settings: CampaignSettings
    task: Task
    ops: list[Any]  # the user operators of the supervisor's op table (op_specs), registered first
    deadline: float  # wall-clock time (time.time) the campaign's budget ends
    parent: int  # the supervisor's pid: the worker ends itself when that process dies
    first: int = 0  # the index of its first listed example (``task.examples``)
    rerun: dict[str, Any] | None = None  # the serialized example its predecessor died on, run first
    coverage_include: list[str] = field(default_factory=list)  # source files to measure; empty: off
    coverage_file: str | None = None
    op_sources: list[str] = field(default_factory=list)  # the --op sources of custom operators, loaded first

    def write(self, path: str) -> None:
        """Write to ``path``, a new file only this user may read (mode 0600)."""
        data = {**dataclasses.asdict(self), "settings": self.settings.to_data()}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)

    @classmethod
    def take(cls, path: str) -> WorkerStart:
        """Read ``path`` and delete it."""
        with open(path) as fh:
            data = json.load(fh)
        os.unlink(path)
        return cls(**{**data, "settings": CampaignSettings.from_data(data["settings"]), "task": Task(**data["task"])})


# ---------------------------------------------------------------------------- worker -> supervisor


@dataclass(frozen=True)
class ExampleName:
    """The name of the listed example about to start: a death on it is reported by name."""

    name: str


@dataclass(frozen=True)
class Started:
    """An example starts, serialized (None: it cannot be), before the pass runs on it."""

    case: dict[str, Any] | None


@dataclass(frozen=True)
class Blaming:
    """Whether a death of the process from now on is the pass's (True at each example's start)
    or not (the gate's baseline is running)."""

    on_pass: bool


@dataclass(frozen=True)
class Done:
    """The example in flight ran through."""


@dataclass(frozen=True)
class Counts:
    """The worker's totals so far, sent after every example."""

    examples: int
    counts: dict[str, int]
    stats: dict[str, int]


@dataclass(frozen=True)
class BucketFound:
    """A bucket appeared, or its example shrank: the bucket as the worker keeps it, without
    its live example (``Bucket.plain``)."""

    bucket: Bucket


@dataclass(frozen=True)
class Minimized:
    """A bucket's shrinking is over: its last ``BucketFound`` example is the one it keeps."""

    id: str


@dataclass(frozen=True)
class Note:
    """One line for the user (a shared database lost)."""

    text: str


@dataclass(frozen=True)
class Finished:
    """The worker's campaign ended (``stopped_by`` says why); its exit follows."""

    stopped_by: str


@dataclass(frozen=True)
class Raised:
    """The exception that is ending this worker, raised outside anything the pass ran in:
    generation, the engine, or a check's ``InternalError`` (verify turns the pass's own errors
    into findings). Never a finding; the worker dies of it, and its log holds the traceback."""

    text: str


WorkerMessage = ExampleName | Started | Blaming | Done | Counts | BucketFound | Minimized | Note | Raised | Finished


# ---------------------------------------------------------------------------- supervisor -> worker


@dataclass(frozen=True)
class Stop:
    """Finish now: what was sent is kept."""
