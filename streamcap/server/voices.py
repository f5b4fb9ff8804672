"""`/streams/ID/voices`: enrol a voice from a short recording sent over HTTP, so that the
stream's voice labeller names it ("Mary") instead of numbering it (issue 37, item 4; the
command line's ``--enroll Mary=mary.wav`` does the same for every stream, from a file).

``POST /streams/ID/voices?name=Mary`` with a WAV file as the body (16-bit PCM, mono or
stereo, 8-48 kHz, at most `enrol.MAX_UPLOAD_S` seconds and `http_body.MAX_SAMPLE_BYTES`;
the mic page's "Enrol my voice" records one) answers 200 with
``{"stream": ID, "name": "Mary", "speech_s": 5.2, "was": "", "voices": ["Mary"]}``: ``was`` is
the label the voice had in the running meeting ("Speaker 1": its earlier finals keep it, a
rename names them) or "" for a voice not heard yet; every answer also lists the enrolled voices
with their seconds of speech, ``"enrolled": [{"name": "Mary", "speech_s": 5.2}]`` (never an
embedding). ``GET`` (the view token's) answers the list. A name enrolled already is a 409,
unless the request says ``&replace=1``: the new sample then takes the old one's place
(`SpeakerLabeller.enrol`'s ``replace``; a name not enrolled yet is simply enrolled).
``DELETE /streams/ID/voices?name=Mary`` takes the voice back (`SpeakerLabeller.forget`,
`core.speaker_removal`): later finals no longer get the name, past captions keep it; the
answer says which label the voice's next finals get as ``now`` ("Speaker 2" for a voice the
meeting had numbered before its enrolment, else ""); 404 for a name the stream has not
enrolled. Who may enrol or take back: who may rename (`names.write_refusal`: the publish
token, else loopback clients only; an allowed Origin), decided on the request's headers before
a byte of its body is kept (`may_upload`, `http_body`): a stranger's megabyte is read and
dropped as any big body is, never held. The name follows the rules of a
rename's (`client_text.parse_speaker`), and may not be an automatic label ("Speaker 2"), a
voice ``--enroll`` gave the server, or one the stream has. Refusals are one line: 400 (name,
body: not a WAV file, too long, too little sound), 403, 404 (DELETE: not enrolled), 405, 409
(the name or the voice is taken, or the server labels no voices), 413, 503 (no voice encoder
installed). ``/metrics`` counts each stream's enrolled voices (`voice_metrics`).

What an enrolment changes: the stream's running labellers (a `LiveStream`'s stage, kept here
per stream while it lives: `wrap`) take the voice at once (`SpeakerLabeller.enrol`, under its
lock, on a thread), and every labeller the stream gets later starts from it, as from the
server's ``--enroll`` voices. The sample is embedded off the event loop by the encoder the
labellers use (a model). With ``--record DIR`` the embedding (not the audio) is kept in
``DIR/<stream>.voices.json``, written atomically (removed with the stream's last voice), and
read back when the server starts: a restarted server still knows the voice, as it still knows
the stream's renames, and no longer knows one taken back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import weakref
from collections.abc import Awaitable, Callable, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import numpy as np
from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from . import routes
from .client_text import parse_speaker
from .close import ProtocolError
from .config import LiveStreamLike, ServerConfig, StreamFactory
from .http_body import MAX_BODY_BYTES, MAX_SAMPLE_BYTES, BodyRequest
from .names import refuse_write, write_refusal
from .refusal import Refusals
from .request import STREAM_ID_RE, check_token, extract_token
from .voice_metrics import VoiceCounts

if TYPE_CHECKING:
    from streamcap.core.captions import CaptionEvent
    from streamcap.runtime.enrol import EnrolledVoice
    from streamcap.server.protocol import StartMessage

log = logging.getLogger("streamcap.server")

VOICES_RE = re.compile(r"/streams/([A-Za-z0-9_-][A-Za-z0-9_.-]{0,63})/voices")
#: Streams that may hold enrolled voices (a stream need not exist yet: one enrols before
#: publishing); beyond it, 409. Each holds at most `SpeakerConfig.max_speakers` - 1.
MAX_STREAMS = 1024
_SUFFIX = ".voices.json"
_JSON = "application/json; charset=utf-8"


class VoiceRefused(Exception):
    """An enrolment refused: its status and one line saying why."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def _most_voices() -> int:
    from streamcap.core.speakers import SpeakerConfig

    return SpeakerConfig().max_speakers - 1  # room for one voice nobody enrolled, as --enroll


def check_name(raw: str | None) -> str:
    """The name asked for in its normal form (`client_text.parse_speaker`), or 400."""
    from streamcap.runtime.enrol import is_auto_label

    if not raw or not raw.strip():
        raise VoiceRefused(HTTPStatus.BAD_REQUEST, "give the voice's name: ?name=Mary")
    try:
        name = parse_speaker(raw)
    except ProtocolError as e:
        raise VoiceRefused(HTTPStatus.BAD_REQUEST, e.reason) from None
    if is_auto_label(name):
        raise VoiceRefused(
            HTTPStatus.BAD_REQUEST, f"{name!r} is an automatic label; give the person's name"
        )
    return name


class Voices:
    """Answers `/streams/ID/voices` and hands enrolled voices to the streams' labellers (see
    the module docstring). Owned by the event loop; blocking work goes to threads."""

    def __init__(
        self,
        config: ServerConfig,
        refusals: Refusals,
        speakers: str,
        server_voices: Sequence[Any] = (),
    ) -> None:
        self.config = config
        self.refusals = refusals
        self.speakers = speakers
        #: names ``--enroll`` gave every stream: not a stream's to take
        self.server_names = frozenset(v.name for v in server_voices)
        #: stream -> the voices enrolled over HTTP, in order
        self.stored: dict[str, list[EnrolledVoice]] = {}
        #: stream -> its running labellers (a session's stage lives as long as its stream)
        self._live: dict[str, weakref.WeakSet[Any]] = {}
        self._lock = asyncio.Lock()  # one enrolment at a time: checks and changes stay together
        refusals.metrics.registry.register(VoiceCounts(self.counts))  # read at each scrape

    def counts(self) -> dict[str, int]:
        """Each stream's enrolled voices (over HTTP; not ``--enroll``'s), for ``/metrics``."""
        return {stream: len(voices) for stream, voices in self.stored.items() if voices}

    # ------------------------------------------------------------------ streams

    def wrap(self, factory: StreamFactory) -> StreamFactory:
        """``factory`` whose streams' labellers know the stream's enrolled voices from the
        start, and are reached by later enrolments while they run."""

        def make(
            stream: str, start: StartMessage, on_caption: Callable[[CaptionEvent], None]
        ) -> LiveStreamLike:
            from streamcap.runtime.enrol import EnrolmentError

            live = factory(stream, start, on_caption)
            stage = getattr(live, "stage", None)
            if stage is not None and callable(getattr(stage, "enrol", None)):
                for voice in self.stored.get(stream, ()):
                    try:
                        stage.enrol(voice)  # before its first final: no embedding, quick
                    except (EnrolmentError, ValueError) as e:  # another model, a name taken
                        log.warning("stream %s: enrolled voice not used: %s", stream, e)
                for gone in [k for k, v in self._live.items() if not v]:  # ended streams'
                    del self._live[gone]
                self._live.setdefault(stream, weakref.WeakSet()).add(stage)
            return live

        return make

    def _labellers(self, stream: str) -> list[Any]:
        return list(self._live.get(stream, ()))

    # ------------------------------------------------------------------ HTTP

    def may_upload(self, request: BodyRequest, address: str) -> bool:
        """Whether this client may send a voice sample's body (checked on its headers, before
        a byte of the body is kept: `http_body`); the route checks again and says why not."""
        token = extract_token(dict(parse_qsl(urlsplit(request.path).query)), request.headers.get)
        return write_refusal(self.config, request, address, token, "enrolling") is None

    def response(
        self, stream: str, request: Request, connection: ServerConnection
    ) -> Response | Awaitable[Response]:
        params = dict(parse_qsl(urlsplit(request.path).query))
        token = extract_token(params, request.headers.get)
        if request.method == "GET":
            if not check_token(self.config.view_token, token):
                return routes.text(HTTPStatus.UNAUTHORIZED, "missing or wrong view token")
            return self._answer(HTTPStatus.OK, stream)
        if request.method == "DELETE":
            refused = refuse_write(
                self.config, self.refusals, request, connection, token, "taking a voice back",
                f"unenrol {stream}", MAX_BODY_BYTES, "DELETE needs no body",
            )  # fmt: skip
            if refused is not None:
                return refused
            return self._named(stream, params, self._delete)
        if request.method != "POST":
            return routes.response(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "use POST with a WAV file to enrol a voice, GET to list them, DELETE to take "
                "one back\n",
                extra=(("Allow", "GET, POST, DELETE"),),
            )
        refused = refuse_write(
            self.config, self.refusals, request, connection, token, "enrolling a voice",
            f"enrol {stream}", MAX_SAMPLE_BYTES,
            f"a voice sample takes at most {MAX_SAMPLE_BYTES} (30 s of 16 kHz mono 16-bit WAV)",
        )  # fmt: skip
        if refused is not None:
            return refused
        body = request.body if isinstance(request, BodyRequest) else b""
        replace = params.get("replace") == "1"
        return self._named(stream, params, lambda s, n: self._post(s, n, body, replace))

    @staticmethod
    def _named(
        stream: str, params: dict[str, str], then: Callable[[str, str], Awaitable[Response]]
    ) -> Response | Awaitable[Response]:
        """``then(stream, name)`` for the request's ``?name=`` (`check_name`), else its 400."""
        try:
            name = check_name(params.get("name"))
        except VoiceRefused as e:
            return routes.text(e.status, e.reason)
        return then(stream, name)

    def _answer(self, status: HTTPStatus, stream: str, **extra: Any) -> Response:
        stored = self.stored.get(stream, ())
        enrolled = [{"name": v.name, "speech_s": round(v.speech_s, 1)} for v in stored]
        doc = {"stream": stream, **extra, "voices": [v.name for v in stored], "enrolled": enrolled}
        return routes.response(status, json.dumps(doc, ensure_ascii=False) + "\n", _JSON)

    async def _post(self, stream: str, name: str, body: bytes, replace: bool) -> Response:
        try:
            async with self._lock:
                voice, was = await self._enrol(stream, name, body, replace)
        except VoiceRefused as e:
            return routes.text(e.status, e.reason)
        log.info("stream %s: voice enrolled: %s (%.1f s)", stream, name, voice.speech_s)
        return self._answer(
            HTTPStatus.OK, stream, name=name, speech_s=round(voice.speech_s, 1), was=was
        )

    async def _delete(self, stream: str, name: str) -> Response:
        """``name`` taken back from ``stream``: out of its running labellers (each under its
        lock, on a thread), of the voices its later sessions start from, and of the file."""
        async with self._lock:
            stored = self.stored.get(stream, [])
            if name in self.server_names:  # every stream's: the command line's to change
                return routes.text(
                    HTTPStatus.CONFLICT, f"{name} is enrolled on this server (--enroll), "
                    "not in one stream: restart the server without it"
                )  # fmt: skip
            if not any(v.name == name for v in stored):
                return routes.text(HTTPStatus.NOT_FOUND, f"{name} is not enrolled in {stream}")
            stored[:] = [v for v in stored if v.name != name]  # a session from now: without
            if not stored:
                del self.stored[stream]
            now = ""
            for stage in self._labellers(stream):  # the sessions running: each under its lock
                if callable(getattr(stage, "forget", None)):
                    now = await asyncio.to_thread(stage.forget, name) or now
            if self.config.record_dir is not None:
                await asyncio.to_thread(_save, self.config.record_dir, stream, stored)
        log.info("stream %s: enrolled voice taken back: %s", stream, name)
        return self._answer(HTTPStatus.OK, stream, name=name, now=now)

    async def _enrol(
        self, stream: str, name: str, body: bytes, replace: bool
    ) -> tuple[EnrolledVoice, str]:
        from streamcap.runtime.enrol import EnrolmentError

        stored = self.stored.get(stream, [])
        replaces = replace and any(v.name == name for v in stored)
        labellers = self._labellers(stream)
        if self.speakers != "auto" and not labellers:
            raise VoiceRefused(
                HTTPStatus.CONFLICT,
                "this server labels no voices: start it with --speakers auto",
            )
        if name in self.server_names:
            raise VoiceRefused(
                HTTPStatus.CONFLICT, f"{name} is enrolled on this server already (--enroll)"
            )
        if not replaces and any(v.name == name for v in stored):
            raise VoiceRefused(
                HTTPStatus.CONFLICT,
                f"{name} is enrolled in {stream} already (add &replace=1 to replace the sample)",
            )
        if len(stored) - replaces + len(self.server_names) >= _most_voices():
            raise VoiceRefused(HTTPStatus.CONFLICT, f"{stream} has the most voices it may enrol")
        if not stored and len(self.stored) >= MAX_STREAMS:
            raise VoiceRefused(HTTPStatus.CONFLICT, "this server holds the most enrolled voices")
        try:
            voice = await asyncio.to_thread(_embed, name, body, labellers)
        except EnrolmentError as e:  # not a WAV file, too long, too little sound
            raise VoiceRefused(HTTPStatus.BAD_REQUEST, str(e)) from None
        was = ""
        try:
            for stage in labellers:  # the running meeting: under its labeller's lock
                was = await asyncio.to_thread(stage.enrol, voice, replaces) or was
        except EnrolmentError as e:  # the name or the voice is the meeting's already
            raise VoiceRefused(HTTPStatus.CONFLICT, str(e)) from None
        kept = [v for v in stored if v.name != name]  # replaced: the new sample last
        self.stored[stream] = [*kept, voice]
        if self.config.record_dir is not None:
            await asyncio.to_thread(_save, self.config.record_dir, stream, self.stored[stream])
        return voice, was

    # ------------------------------------------------------------------ --record

    async def load(self) -> None:
        """The voices a recorded server kept (`_save`), read off the event loop at start."""
        if self.config.record_dir is not None:
            self.stored.update(await asyncio.to_thread(_load_all, self.config.record_dir))


def _embed(name: str, body: bytes, labellers: list[Any]) -> EnrolledVoice:
    """The sample embedded by the encoder the stream's labellers use (the running one's, else
    the one a new labeller takes: `SpeakerLabeller`'s default). Runs on a thread."""
    from streamcap.errors import UserError
    from streamcap.runtime.enrol import embed_voices, sample_from_wav

    sample = sample_from_wav(name, body)  # EnrolmentError: the caller's 400
    if labellers:
        encoder = labellers[0].encoder
    else:
        from streamcap.speakers.registry import default_model, encoder_for

        try:
            encoder = encoder_for(default_model())
        except UserError as e:  # its weights are not installed
            raise VoiceRefused(
                HTTPStatus.SERVICE_UNAVAILABLE, f"speaker labels unavailable here: {e}"
            ) from None
    return embed_voices([sample], encoder)[0]


def _path(root: Path, stream: str) -> Path:
    return root / f"{stream}{_SUFFIX}"


def _save(root: Path, stream: str, voices: list[EnrolledVoice]) -> None:
    """``root/<stream>.voices.json``, replaced atomically (a crash leaves the old or the new);
    removed when ``voices`` is empty (the stream's last voice taken back)."""
    doc = {
        "stream": stream,
        "voices": [
            {"name": v.name, "model": v.model, "speech_s": v.speech_s,
             "embedding": [round(float(x), 7) for x in v.embedding]}
            for v in voices
        ],
    }  # fmt: skip
    path = _path(root, stream)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if not voices:
            path.unlink(missing_ok=True)
            return
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:  # the voice still names the stream until the server stops
        log.error("stream %s: enrolled voices not saved to %s: %s", stream, path, e)


def _load_all(root: Path) -> dict[str, list[EnrolledVoice]]:
    """Every ``<stream>.voices.json`` under ``root``; a broken one is skipped with a warning."""
    out: dict[str, list[EnrolledVoice]] = {}
    try:
        paths = sorted(root.glob(f"*{_SUFFIX}"))[:MAX_STREAMS]
    except OSError:
        return out
    for path in paths:
        stream = path.name[: -len(_SUFFIX)]
        if not STREAM_ID_RE.fullmatch(stream) or not path.is_file():
            continue
        try:
            out[stream] = _parse(json.loads(path.read_bytes()))
        except (OSError, ValueError, TypeError, KeyError, VoiceRefused) as e:
            log.warning("enrolled voices in %s not read: %s", path, e)
    return out


def _parse(doc: Any) -> list[EnrolledVoice]:
    """A saved document's voices, each checked as a client's input would be."""
    from streamcap.runtime.enrol import EnrolledVoice

    voices = []
    for item in doc["voices"][: _most_voices()]:
        emb = np.asarray(item["embedding"], dtype=np.float32)
        speech = float(item["speech_s"])
        if emb.ndim != 1 or not 0 < emb.size <= 4096 or not np.isfinite(emb).all():
            raise ValueError("not an embedding")
        if not 0 < speech <= 3600:
            raise ValueError("speech_s out of range")
        voices.append(EnrolledVoice(check_name(item["name"]), str(item["model"]), emb, speech))
    return voices
