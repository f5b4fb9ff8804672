"""Subtitle and transcript files: SRT, WebVTT, JSONL, TXT and openai-whisper's JSON.

The cue policy is ours (`streamcap.cues`: line width and count, cuts at sentence ends, timed by
the words); writing SRT and WebVTT is the `srt` and `webvtt-py` libraries' job. One module per
format family (`subtitles`, `jsonl`, `whisper_json`, `text`), what they share in `base`, and the
formats by name in `registry` (the output-format port: `register_format`). Import from the
defining module; this face is for users (names resolved on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.formats.base import CaptionWriter as CaptionWriter
    from streamcap.formats.base import Decoded as Decoded
    from streamcap.formats.base import format_srt_time as format_srt_time
    from streamcap.formats.base import format_vtt_time as format_vtt_time
    from streamcap.formats.base import in_time_order as in_time_order
    from streamcap.formats.jsonl import WIRE_ONLY as WIRE_ONLY
    from streamcap.formats.jsonl import JsonlWriter as JsonlWriter
    from streamcap.formats.jsonl import TranscriptJsonlWriter as TranscriptJsonlWriter
    from streamcap.formats.registry import FileFormat as FileFormat
    from streamcap.formats.registry import WriterFactory as WriterFactory
    from streamcap.formats.registry import WriterOptions as WriterOptions
    from streamcap.formats.registry import cue_formats as cue_formats
    from streamcap.formats.registry import file_formats as file_formats
    from streamcap.formats.registry import format_of as format_of
    from streamcap.formats.registry import live_formats as live_formats
    from streamcap.formats.registry import open_writer as open_writer
    from streamcap.formats.registry import register_format as register_format
    from streamcap.formats.subtitles import SrtWriter as SrtWriter
    from streamcap.formats.subtitles import SubtitleWriter as SubtitleWriter
    from streamcap.formats.subtitles import VttWriter as VttWriter
    from streamcap.formats.subtitles import render_srt as render_srt
    from streamcap.formats.subtitles import render_vtt as render_vtt
    from streamcap.formats.text import TxtWriter as TxtWriter
    from streamcap.formats.text import render_txt as render_txt
    from streamcap.formats.whisper_json import WhisperJsonWriter as WhisperJsonWriter

#: public name -> the module of this package that defines it
_EXPORTS = {
    "CaptionWriter": "base",
    "Decoded": "base",
    "format_srt_time": "base",
    "format_vtt_time": "base",
    "in_time_order": "base",
    "WIRE_ONLY": "jsonl",
    "JsonlWriter": "jsonl",
    "TranscriptJsonlWriter": "jsonl",
    "FileFormat": "registry",
    "WriterFactory": "registry",
    "WriterOptions": "registry",
    "cue_formats": "registry",
    "file_formats": "registry",
    "format_of": "registry",
    "live_formats": "registry",
    "open_writer": "registry",
    "register_format": "registry",
    "SrtWriter": "subtitles",
    "SubtitleWriter": "subtitles",
    "VttWriter": "subtitles",
    "render_srt": "subtitles",
    "render_vtt": "subtitles",
    "TxtWriter": "text",
    "render_txt": "text",
    "WhisperJsonWriter": "whisper_json",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
