"""An output format is a port with a registry (`streamcap.formats.registry`): a new one is a
writer and one `register_format` call. The example: a writer of capitals, registered here,
then chosen by suffix and by ``--format`` like the formats streamcap ships."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streamcap.cli.outputs import plan_outputs
from streamcap.core.captions import Caption
from streamcap.formats.base import CaptionWriter, Decoded
from streamcap.formats.registry import (
    _REGISTRY,
    cue_formats,
    file_formats,
    format_of,
    live_formats,
    open_writer,
    register_format,
)


class ShoutWriter(CaptionWriter):
    """The example format: each final in capitals."""

    def _format(self, caption: Caption, decoded: Decoded | None) -> str:
        return caption.text.upper() + "\n"


@pytest.fixture
def shout() -> Iterator[None]:
    register_format("shout", lambda target, options: ShoutWriter(target))
    try:
        yield
    finally:
        _REGISTRY.pop("shout", None)


def _final(text: str) -> Caption:
    return Caption("final", "s", 1, 1, text, 0.0, 1.0, 0, 0.0)


def test_the_shipped_formats() -> None:
    assert file_formats() == ("srt", "vtt", "jsonl", "txt", "json", "md", "tsv")
    # whisper's JSON needs each final's decode: not live
    assert live_formats() == ("srt", "vtt", "jsonl", "txt", "md", "tsv")
    assert cue_formats() == ("srt", "vtt")


def test_a_registered_format_is_chosen_by_suffix_and_by_format(shout: None, tmp_path: Path) -> None:
    assert "shout" in file_formats() and format_of("a.SHOUT") == "shout"
    path = tmp_path / "talk.shout"
    with open_writer(path) as w:
        w.write(_final("ask not what your country can do for you"))
    assert path.read_text() == "ASK NOT WHAT YOUR COUNTRY CAN DO FOR YOU\n"
    (files,) = plan_outputs(["talk.wav"], [str(tmp_path)], "srt,shout")
    assert [p.name for p in files] == ["talk.srt", "talk.shout"]


def test_an_unknown_suffix_names_the_registered_formats(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"use \.srt, \.vtt, \.jsonl, \.txt, \.json"):
        open_writer(tmp_path / "x.doc")
