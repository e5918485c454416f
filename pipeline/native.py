"""The switch for pipeline's compiled parts: storage's ``STREAMGATE_NO_EXTENSIONS`` (one variable
turns every package's compiled parts off)."""

from __future__ import annotations

from storage.native import OFF, refuse_if_off

__all__ = ["OFF", "refuse_if_off"]
