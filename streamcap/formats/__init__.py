"""Subtitle and transcript files: SRT, WebVTT, JSONL, TXT, TSV, Markdown minutes and
openai-whisper's JSON; and a live HLS subtitle rendition (`hls`).

The cue policy is ours (`streamcap.cues`: line width and count, cuts at sentence ends, timed by
the words); writing SRT and WebVTT is the `srt` and `webvtt-py` libraries' job. One module per
format family (`subtitles`, `jsonl`, `whisper_json`, `text`, `tsv`, `minutes`), what they share in
`base`, and the formats by name in `registry` (the output-format port: `register_format`).
Import from the defining module; this face is for users (names resolved on first use).
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
    from streamcap.formats.base import spoken_span as spoken_span
    from streamcap.formats.hls import LiveVttTrack as LiveVttTrack
    from streamcap.formats.hls import VideoVariant as VideoVariant
    from streamcap.formats.hls import master_playlist as master_playlist
    from streamcap.formats.hls import vtt_segment as vtt_segment
    from streamcap.formats.jsonl import WIRE_ONLY as WIRE_ONLY
    from streamcap.formats.jsonl import JsonlWriter as JsonlWriter
    from streamcap.formats.jsonl import TranscriptJsonlWriter as TranscriptJsonlWriter
    from streamcap.formats.minutes import PARAGRAPH_PAUSE_S as PARAGRAPH_PAUSE_S
    from streamcap.formats.minutes import Minutes as Minutes
    from streamcap.formats.minutes import MinutesWriter as MinutesWriter
    from streamcap.formats.minutes import clock_time as clock_time
    from streamcap.formats.minutes import md_escape as md_escape
    from streamcap.formats.minutes import render_minutes as render_minutes
    from streamcap.formats.registry import FileFormat as FileFormat
    from streamcap.formats.registry import WriterFactory as WriterFactory
    from streamcap.formats.registry import WriterOptions as WriterOptions
    from streamcap.formats.registry import cue_formats as cue_formats
    from streamcap.formats.registry import file_formats as file_formats
    from streamcap.formats.registry import format_of as format_of
    from streamcap.formats.registry import live_formats as live_formats
    from streamcap.formats.registry import open_format as open_format
    from streamcap.formats.registry import open_writer as open_writer
    from streamcap.formats.registry import register_format as register_format
    from streamcap.formats.subtitles import SrtWriter as SrtWriter
    from streamcap.formats.subtitles import SubtitleWriter as SubtitleWriter
    from streamcap.formats.subtitles import VttWriter as VttWriter
    from streamcap.formats.subtitles import render_srt as render_srt
    from streamcap.formats.subtitles import render_vtt as render_vtt
    from streamcap.formats.text import TxtWriter as TxtWriter
    from streamcap.formats.text import render_txt as render_txt
    from streamcap.formats.tsv import TsvWriter as TsvWriter
    from streamcap.formats.tsv import render_tsv as render_tsv
    from streamcap.formats.whisper_json import WhisperJsonWriter as WhisperJsonWriter

#: public name -> the module of this package that defines it
_EXPORTS = {
    "CaptionWriter": "base",
    "Decoded": "base",
    "format_srt_time": "base",
    "format_vtt_time": "base",
    "in_time_order": "base",
    "spoken_span": "base",
    "LiveVttTrack": "hls",
    "VideoVariant": "hls",
    "master_playlist": "hls",
    "vtt_segment": "hls",
    "JsonlWriter": "jsonl",
    "TranscriptJsonlWriter": "jsonl",
    "WIRE_ONLY": "jsonl",
    "Minutes": "minutes",
    "MinutesWriter": "minutes",
    "PARAGRAPH_PAUSE_S": "minutes",
    "clock_time": "minutes",
    "md_escape": "minutes",
    "render_minutes": "minutes",
    "FileFormat": "registry",
    "WriterFactory": "registry",
    "WriterOptions": "registry",
    "cue_formats": "registry",
    "file_formats": "registry",
    "format_of": "registry",
    "live_formats": "registry",
    "open_format": "registry",
    "open_writer": "registry",
    "register_format": "registry",
    "SrtWriter": "subtitles",
    "SubtitleWriter": "subtitles",
    "VttWriter": "subtitles",
    "render_srt": "subtitles",
    "render_vtt": "subtitles",
    "TxtWriter": "text",
    "render_txt": "text",
    "TsvWriter": "tsv",
    "render_tsv": "tsv",
    "WhisperJsonWriter": "whisper_json",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
