"""The benchmark's manifest (`streamcap bench --manifest`): its format, as ``--help`` shows
it, and the utterances it names that pass the command's filters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streamcap.errors import UserError

MANIFEST_HELP = """\
manifest: a JSONL file, one JSON object per line (blank lines skipped), one utterance each:
  {"id": "en_real_jfk", "audio": "wav/en_real_jfk.wav", "text": "And so my fellow ...",
   "lang": "en", "kind": "real", "duration": 11.0}
  id        name shown in the per-utterance lines and the --json output (required)
  audio     audio file, relative to the manifest's folder (required)
  lang      language code: --lang filters on it; a multilingual model decodes in it
            (missing: the language is detected)
  kind      free label, e.g. real or tts: --kind filters on it
  duration  seconds: --max-duration filters on it (missing: kept)
  text      the reference transcript: the WER of the final transcripts (after Whisper's
            normaliser) in the precision comparison; exactness is checked token for token
            against plain greedy at the same precision instead
Other fields are ignored. ../shared/eval-dev/manifest.jsonl is one.
"""


def read_manifest(
    path: Path, *, lang: str | None, kind: str | None, max_duration: float, limit: int
) -> list[dict[str, Any]]:
    """The manifest's utterances that pass the filters (``--lang``, ``--kind``,
    ``--max-duration``, then the first ``--limit``: 0 = all); UserError on a missing or bad
    file, or when none pass."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UserError(f"cannot read --manifest {path}: {e.strerror or e}") from None
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{n}: not JSON ({e.msg})") from None
        if not isinstance(item, dict) or "id" not in item or "audio" not in item:
            raise UserError(f'{path}:{n}: each line needs an object with "id" and "audio"')
        items.append(item)
    items = [
        d
        for d in items
        if (lang is None or d.get("lang") == lang)
        and (kind is None or d.get("kind") == kind)
        and d.get("duration", 0) <= max_duration
    ]
    if limit:
        items = items[:limit]
    if not items:
        raise UserError(f"no utterances in {path} match --lang / --kind / --max-duration")
    for d in items:
        audio = path.parent / d["audio"]
        if not audio.is_file():
            raise UserError(f"{path}: audio of {d['id']!r} not found: {audio}")
    return items
