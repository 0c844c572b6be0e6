"""Rewrite the measured values of a base.toml (the sdist's sha256, the pre-image blobs) in place, line by line, so
that its comments, order and layout stay as the author wrote them."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

TABLE = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
SHA_LINE = re.compile(r'^(\s*sdist_sha256\s*=\s*)"[^"]*"(.*)$')
# A key (bare or a basic string) = a basic string, and whatever follows it (a comment).
KEY_VALUE = re.compile(r'^(\s*)("(?:[^"\\]|\\.)*"|[A-Za-z0-9_.\-]+)(\s*=\s*)"[^"]*"(.*)$')


class RecipeEditError(Exception):
    """The file is laid out in a way the line rewrite cannot follow (the values must be edited by hand)."""


def _key_of(raw: str) -> str:
    return json.loads(raw) if raw.startswith('"') else raw


def rewrite(text: str, sha256: str | None = None, blobs: dict[str, str] | None = None) -> str:
    """``text`` with ``sdist_sha256`` of ``[base]`` set to ``sha256`` and each ``[base.blobs]`` entry named in
    ``blobs`` set to its value (None: left as it is). Raises ``RecipeEditError`` unless the result reads back with
    exactly those values."""
    blobs = blobs or {}
    table = ""
    lines = []
    for line in text.splitlines(keepends=True):
        body, newline = (line[:-1], "\n") if line.endswith("\n") else (line, "")
        if header := TABLE.match(body):
            table = header.group(1).strip()
        elif table == "base" and sha256 is not None and (match := SHA_LINE.match(body)):
            body = f'{match.group(1)}"{sha256}"{match.group(2)}'
        elif table == "base.blobs" and (match := KEY_VALUE.match(body)) and _key_of(match.group(2)) in blobs:
            indent, key, equals, rest = match.groups()
            body = f'{indent}{key}{equals}"{blobs[_key_of(key)]}"{rest}'
        lines.append(body + newline)
    result = "".join(lines)
    written = tomllib.loads(result)["base"]
    if (sha256 is not None and written.get("sdist_sha256") != sha256) or \
            any(written.get("blobs", {}).get(rel) != blob for rel, blob in blobs.items()):
        raise RecipeEditError("the values could not be rewritten line by line (inline tables or multi-line "
                              "strings?): edit base.toml by hand")
    return result


def rewrite_file(path: Path, sha256: str | None = None, blobs: dict[str, str] | None = None) -> None:
    path.write_text(rewrite(path.read_text(), sha256, blobs))
