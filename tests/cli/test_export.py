"""Issue 37, item 3: `streamcap export REC.jsonl -f md` (a finished recording as minutes, text
or subtitles) and `streamcap transcribe -f md`, run as a user runs them (a real subprocess).
Recordings are written as `serve --record DIR` writes them (`recordkit`), damaged on purpose
where the test says so; the export is compared with the running server's own download of the
same recording.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from clikit import ROOT, parse_srt, run

sys.path.insert(0, str(ROOT / "tests"))  # the server tests' kits (recordings, a server)
from recordkit import final, record_server, write_recording  # noqa: E402
from serverkit import http_get  # noqa: E402

from streamcap.core.captions import Caption  # noqa: E402
from streamcap.formats.minutes import render_minutes  # noqa: E402

DATA = ROOT / "tests" / "data"


def standup(root: Path, *extra: str | dict[str, object]) -> tuple[Path, list[Caption]]:
    """A recorded stand-up: Ana, Ben, a voice label, Ana again (one turn of two finals)."""
    finals = [
        final("standup", 1, text="Good morning.", speaker="Ana"),
        final("standup", 2, text="Let's start.", speaker="Ana"),
        final("standup", 3, text="The build is green.", speaker="Ben"),
        final("standup", 4, text="One question.", speaker="Speaker 3"),
        final("standup", 5, text="Go ahead.", speaker="Ana"),
    ]
    path = write_recording(root, "standup", [*finals, *extra])
    return path, finals


def today() -> str:
    return time.strftime("%Y-%m-%d")


def test_export_minutes_to_stdout_as_the_server_serves_them(tmp_path: Path) -> None:
    """The export of a recording is byte for byte the running server's download of it."""
    rec, finals = standup(tmp_path)
    res = run("export", str(rec), timeout=60)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout == render_minutes(finals, title="standup", date=today())
    assert "**Ana** (00:00:01): Good morning. Let's start.\n" in res.stdout
    assert "## Participants\n\n- Ana\n- Ben\n- Speaker 3\n" in res.stdout
    with record_server(tmp_path) as srv:
        for kind in ("md", "txt", "srt", "vtt"):
            status, _, served = http_get(srv.url(f"/streams/standup.{kind}"))
            exported = run("export", str(rec), "-f", kind, timeout=60)
            assert status == 200 and exported.returncode == 0
            assert exported.stdout == served, kind


def test_export_to_a_file_by_its_suffix(tmp_path: Path) -> None:
    rec, finals = standup(tmp_path)
    out = tmp_path / "out" / "standup.srt"
    out.parent.mkdir()
    res = run("export", str(rec), "-o", str(out), timeout=60)
    assert res.returncode == 0 and res.stderr.strip() == f"wrote {out}"
    cues = parse_srt(out.read_text(encoding="utf-8"))
    assert [c[3] for c in cues][:3] == [
        "Ana: Good morning.",
        "Let's start.",
        "Ben: The build is green.",
    ]
    res = run("export", str(rec), "-f", "txt", "-o", str(tmp_path / "notes"), timeout=60)
    assert res.returncode == 0
    assert (tmp_path / "notes").read_text(encoding="utf-8").splitlines()[0] == "Ana: Good morning."
    res = run("export", str(rec), "-f", "jsonl", timeout=60)
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [x["text"] for x in lines] == [c.text for c in finals]
    assert "seq" not in lines[0] and lines[0]["speaker"] == "Ana"  # a transcript's JSONL


def test_damaged_lines_are_skipped_with_one_warning_and_names_apply(tmp_path: Path) -> None:
    """Lines the server would not read back are skipped, one warning in all; a rename's line
    (the whole names map) shows every final of the label under its name, the past ones too;
    a partial's line is passed over."""
    names = {"type": "names", "stream": "standup", "names": {"Speaker 3": "Mary"}, "at": 3.5}
    partial = {"type": "partial", "stream": "standup", "seq": 9, "segment": 9, "text": "x",
               "start": 1.0, "end": 2.0, "committed_chars": 0, "latency_ms": 1.0}  # fmt: skip
    bad = [
        '{"type":"final","seq":NaN}',
        "not json",
        json.dumps({**partial, "type": "final", "start": "1"}),  # a time that is text
        json.dumps({"type": "names", "names": {"Speaker 3": "<b>"}, "at": 1.0}),  # markup
    ]
    rec, finals = standup(tmp_path, names, partial, *bad)
    res = run("export", str(rec), "-f", "txt", timeout=60)
    assert res.returncode == 0
    assert res.stdout.splitlines() == [
        "Ana: Good morning.", "Let's start.", "Ben: The build is green.", "Mary: One question.",
        "Ana: Go ahead.",
    ]  # fmt: skip
    warning = res.stderr.strip()
    assert warning.count("\n") == 0 and "skipped 4 unreadable line(s)" in warning, warning
    assert f"of {rec} (line 8: not JSON" in warning, warning
    md = run("export", str(rec), timeout=60).stdout
    assert "- Mary\n" in md and "**Mary** (00:00:04): One question.\n" in md


def test_a_recording_that_does_not_end_in_a_line_break(tmp_path: Path) -> None:
    rec, _ = standup(tmp_path)
    rec.write_bytes(rec.read_bytes().rstrip(b"\n"))
    assert run("export", str(rec), "-f", "txt", timeout=60).stdout.endswith("Ana: Go ahead.\n")


@pytest.mark.parametrize(
    ("args", "rc", "message"),
    [
        (["nowhere.jsonl"], 1, "cannot read nowhere.jsonl: no such file"),
        (["."], 1, "cannot read .: it is a folder"),
        (
            ["REC", "-f", "json"],
            2,
            "--format json: openai-whisper's JSON holds each final's decode",
        ),
        (
            ["REC", "-f", "doc"],
            2,
            "--format doc: unknown format (use srt, vtt, jsonl, txt, md, tsv)",
        ),
        (["REC", "-o", "x.txt", "-f", "md"], 2, "-o x.txt is a .txt file but --format is md"),
        (["REC", "-o", "REC"], 1, "is the recording"),
        (["REC", "-o", "missing/dir/x.md"], 1, "cannot write missing/dir/x.md"),
    ],
)
def test_clear_one_line_errors(tmp_path: Path, args: list[str], rc: int, message: str) -> None:
    rec, _ = standup(tmp_path)
    res = run("export", *[str(rec) if a == "REC" else a for a in args], timeout=60)
    assert res.returncode == rc, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("streamcap export: error: ") and message in last, res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_an_unreadable_recording(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    rec, _ = standup(tmp_path)
    rec.chmod(0)
    res = run("export", str(rec), timeout=60)
    assert res.returncode == 1 and "Permission denied" in res.stderr


@pytest.mark.model
def test_transcribe_writes_minutes(tmp_path: Path) -> None:
    """`transcribe -f md` with the bundled model on real speech: the minutes of the finals it
    wrote into the JSONL beside them, headed by the input's name."""
    jfk = DATA / "en_real_jfk.wav"
    res = run("transcribe", str(jfk), "--language", "en", "-o", str(tmp_path), "-f", "md,jsonl")
    assert res.returncode == 0, res.stderr
    assert f"wrote {tmp_path / 'en_real_jfk.md'}" in res.stderr
    md = (tmp_path / "en_real_jfk.md").read_text(encoding="utf-8")
    lines = (tmp_path / "en_real_jfk.jsonl").read_text(encoding="utf-8").splitlines()
    finals = [
        Caption.from_dict({"stream": "", "seq": k, "committed_chars": 0, "latency_ms": 0, **d})
        for k, d in enumerate(map(json.loads, lines), 1)
    ]
    assert md == render_minutes(finals, title="en_real_jfk.wav", date=today())
    assert md.startswith("# Minutes: en\\_real\\_jfk.wav\n")
    assert "## Participants" not in md  # nobody named: paragraphs led by their time
    assert "\n(00:00:00) And so my fellow Americans" in md, md
