"""A pass module that plants a bug in fxfuzz's own code when imported, as every worker
imports it: the export stages row then asks fxfuzz's stage table for a stage it lacks, a
KeyError raised in fxfuzz's code (fxfuzz/oracles/downstream.py) on every example. The pass is the
identity, so nothing else fails."""

from __future__ import annotations

from fxfuzz.oracles import checks

checks.stages_selected = lambda code, ambient, share: ("no_such_stage",)


def identity(gm, sig):
    return gm, sig
