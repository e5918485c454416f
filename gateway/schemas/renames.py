"""Which chains of migrations only rename members of a value's own object, compiled for the
bytes scanner (gateway._speedups renamed_or_none): the names, their final keys, where it fails."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

# names a chain of top-level renames may involve to be applied on bytes (every subset is tried)
MAX_RENAMED_NAMES = 8
Operation = Mapping[str, Any]
Tokens = Callable[[str], tuple[str, ...]]  # a JSON pointer's tokens (ValueError: not one)
# a chain of top-level renames for renamed_or_none: the names involved (UTF-8), each one's final
# key as JSON (None: it keeps its name), and per subset of them present whether the chain fails
Renames = tuple[tuple[bytes, ...], tuple[bytes | None, ...], bytes]


def top_level_renames(chain: tuple[Sequence[Operation], ...],
                      tokens: Tokens) -> Renames | None:
    """The chain for renamed_or_none when it only renames (or moves) members of the value's own
    object, else None. Each subset of the names involved is run through the chain once, so the
    bytes fail exactly where the parsed value would; a chain in which a member's final name
    depends on which others are present is left to the parsed way."""
    moves = _top_level_moves(chain, tokens)
    if moves is None:
        return None
    names = list(dict.fromkeys(name for move in moves for name in move))
    if not moves or len(names) > MAX_RENAMED_NAMES:
        return None
    finals: dict[str, str] = {}
    failing = bytearray(1 << len(names))
    for subset in range(len(failing)):
        outcome = _renamed_names([name for i, name in enumerate(names) if subset >> i & 1], moves)
        if outcome is None:
            failing[subset] = 1
            continue
        for name, final in outcome.items():
            if finals.setdefault(name, final) != final:
                return None
    try:
        encoded = tuple(name.encode() for name in names)
    except UnicodeEncodeError:  # a lone surrogate: no value's key can be it
        return None
    keys = tuple(None if finals[name] == name else orjson.dumps(finals[name]) for name in names)
    return encoded, keys, bytes(failing)


def _top_level_moves(chain: tuple[Sequence[Operation], ...],
                     tokens: Tokens) -> list[tuple[str, str]] | None:
    """The chain's operations as (from, to) names of top-level members; None when one is not."""
    moves = []
    for operations in chain:
        for operation in operations:
            source, target = operation.get("from"), operation.get("to")
            if (operation.get("op") not in ("rename", "move") or not isinstance(source, str)
                    or not isinstance(target, str)):
                return None
            try:
                source_tokens, target_tokens = tokens(source), tokens(target)
            except ValueError:
                return None
            if len(source_tokens) != 1 or len(target_tokens) != 1:
                return None
            moves.append((source_tokens[0], target_tokens[0]))
    return moves


def _renamed_names(present: list[str], moves: list[tuple[str, str]]) -> dict[str, str] | None:
    """Each present name's final name after the moves, as the parsed way applies them; None
    when one of them fails (its target already holds a value)."""
    holder: dict[str, str] = {name: name for name in present}  # current name -> original
    for source, target in moves:
        if source in holder:
            original = holder.pop(source)
            if target in holder:
                return None
            holder[target] = original
    return {original: final for final, original in holder.items()}
