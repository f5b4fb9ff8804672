"""Enrolled voices: a short recording of a named person, so that the speaker labeller knows the
voice before the meeting starts and its first final carries the name (``--enroll Mary=mary.wav``;
issue 37, item 4). Without one, every voice is "Speaker N" until someone renames it.

A sample is read like any audio file (`audio.load_audio`'s checks: missing, empty, corrupt, a
video without sound, an impossible sample rate are one line each) from its first `MAX_SAMPLE_S`
seconds, its silence at both ends trimmed (frames more than 30 dB below its loudest), and it
must keep `MIN_SAMPLE_S` of sound: the labeller's thresholds were calibrated on probes of
1-3 s (`core.speakers.SpeakerConfig`), and a shorter sample gives a centroid too noisy to name
anyone by. It is embedded as the labeller embeds a final (the encoder's windows every
`SpeakerConfig.window_hop_s`, their unit mean), by the encoder of the labeller that will use it
(similarities are on each model's own scale: `EnrolledVoice.model` says which), once per
process; every stream's labeller then starts from it (`SpeakerTracker.enrol`).

Which utterance to record: 5-30 s of the person speaking normally, alone, on the microphone the
meeting uses (a different room or microphone moves the voice's embedding).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.speakers import SpeakerConfig, config_for, mean_embedding
from streamcap.errors import UserError

if TYPE_CHECKING:
    from streamcap.core.speakers import SpeakerTracker
    from streamcap.speakers.registry import Encoder

#: The least sound (seconds, silence trimmed) a sample must hold.
MIN_SAMPLE_S = 2.0
#: The most of a file that is read (a longer one: its start).
MAX_SAMPLE_S = 60.0
#: The most a sample sent over HTTP may hold (`sample_from_wav`): 30 s of 16 kHz mono 16-bit
#: PCM is 0.96 MB, within the server's body limit (`server.http_body.MAX_SAMPLE_BYTES`).
MAX_UPLOAD_S = 30.0
#: A frame is sound when it is within this many dB of the sample's loudest frame.
_TRIM_DB = 30.0
_FRAME_S = 0.03


class EnrolmentError(UserError):
    """A sample that cannot name a voice (too short, silent, not audio), or a voice a running
    meeting cannot take under that name (`enrol_late`); the message says which and why."""


@dataclass(frozen=True, eq=False)
class VoiceSample:
    """A named person's recorded voice: mono float32 at `SAMPLE_RATE`, silence trimmed."""

    name: str
    audio: np.ndarray
    source: str = ""

    @property
    def seconds(self) -> float:
        return self.audio.size / SAMPLE_RATE


@dataclass(frozen=True, eq=False)
class EnrolledVoice:
    """A sample as the labeller uses it: the unit mean of its windows under ``model``'s
    encoder, and the seconds of sound it held (its weight in the voice's centroid)."""

    name: str
    model: str
    embedding: np.ndarray
    speech_s: float


def trim_silence(audio: np.ndarray) -> np.ndarray:
    """``audio`` from its first to its last frame within `_TRIM_DB` of its loudest."""
    n = int(_FRAME_S * SAMPLE_RATE)
    frames = audio.size // n
    if frames == 0:
        return audio
    rms = np.sqrt(np.mean(audio[: frames * n].reshape(frames, n) ** 2, axis=1) + 1e-12)
    loud = np.flatnonzero(rms >= rms.max() * 10 ** (-_TRIM_DB / 20))
    if rms.max() < 1e-4 or loud.size == 0:  # digital silence
        return audio[:0]
    return audio[loud[0] * n : (loud[-1] + 1) * n]


def load_sample(name: str, path: str | Path) -> VoiceSample:
    """``name``'s sample from the audio file at ``path`` (`EnrolmentError`, or the file's
    `AudioError`, when it cannot be one). ``name`` is taken as it is: the command line checks
    it with the server's rules for names (`server.client_text.parse_speaker`)."""
    from streamcap.audio import iter_audio_chunks

    chunks = iter_audio_chunks(path, chunk_s=1.0)  # AudioError now on a bad file
    try:
        audio = np.concatenate(list(itertools.islice(chunks, int(MAX_SAMPLE_S))))
    finally:
        close = getattr(chunks, "close", None)  # the rest of a long file is never decoded
        if close is not None:
            close()
    return _sample(name, audio, f"--enroll {name}={path}", str(path))


def _sample(name: str, audio: np.ndarray, what: str, source: str) -> VoiceSample:
    """``audio`` (16 kHz mono) trimmed, refused when it holds too little sound."""
    sound = trim_silence(audio)
    if sound.size < MIN_SAMPLE_S * SAMPLE_RATE:
        raise EnrolmentError(
            f"{what}: {sound.size / SAMPLE_RATE:.1f} s of sound, at least "
            f"{MIN_SAMPLE_S:g} s needed (5-30 s of {name} speaking alone names the voice best)"
        )
    return VoiceSample(name, sound, source)


def sample_from_wav(name: str, data: bytes, max_s: float = MAX_UPLOAD_S) -> VoiceSample:
    """``name``'s sample from the bytes of a WAV file sent over HTTP (the page's recording, or
    ``curl --data-binary @mary.wav``; `server.voices`): 16-bit PCM, 1 or 2 channels, 8-48
    kHz, at most ``max_s`` seconds, then the checks of a file's sample. Only WAV: the body
    comes from the network, and a few lines of the standard library read it, where any other
    format would need a decoder (ffmpeg) fed by whoever holds the token. `EnrolmentError`
    says what is wrong in one line."""
    import io
    import wave

    from streamcap.audio.resample import resample

    convert = "convert it with: ffmpeg -i IN -ac 1 -ar 16000 -c:a pcm_s16le mary.wav"
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise EnrolmentError(f"the body is not a WAV file; {convert}")
    try:
        with wave.open(io.BytesIO(data)) as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            if width != 2 or channels not in (1, 2) or not 8000 <= rate <= 48000:
                raise EnrolmentError(
                    f"the WAV file is {channels} channel(s) of {8 * width}-bit at {rate} Hz: "
                    f"send 16-bit PCM, mono or stereo, 8-48 kHz; {convert}"
                )
            if w.getnframes() > max_s * rate:
                raise EnrolmentError(
                    f"the recording is {w.getnframes() / rate:.1f} s long: at most {max_s:g} s "
                    "(5-30 s of one person speaking alone)"
                )
            frames = w.readframes(int(max_s * rate))
    except (wave.Error, EOFError) as e:
        raise EnrolmentError(f"the body is not a readable WAV file ({e}); {convert}") from None
    pcm = np.frombuffer(frames[: len(frames) // (2 * channels) * 2 * channels], "<i2")
    audio = pcm.reshape(-1, channels).astype(np.float32) / 32768.0
    return _sample(name, resample(audio, rate, SAMPLE_RATE), "the recording", "upload")


def embed_voices(
    samples: Sequence[VoiceSample], encoder: Encoder, config: SpeakerConfig | None = None
) -> tuple[EnrolledVoice, ...]:
    """The samples embedded by ``encoder`` as the labeller embeds a final (``config``: the
    labeller's, by default the encoder's calibrated one)."""
    model = str(getattr(encoder, "name", "ge2e"))
    cfg = config or config_for(model)
    voices = []
    for s in samples:
        _, windows = encoder.embed_partials(s.audio, cfg.window_hop_s)
        if len(windows) == 0:
            raise EnrolmentError(f"--enroll {s.name}: the sample gave no voice windows")
        voices.append(EnrolledVoice(s.name, model, mean_embedding(windows), s.seconds))
    return tuple(voices)


def enrol_late(
    tracker: SpeakerTracker,
    label: Callable[[int], str],
    late_names: dict[int, str],
    model: str,
    voice: EnrolledVoice,
) -> str:
    """Name ``voice`` in a labeller's meeting (``tracker``, its labels ``label``, the names it
    gives voices heard before they were enrolled ``late_names``, its encoder's ``model``;
    `SpeakerLabeller.enrol`, its lock held): the
    page enrols a voice while its stream runs, or before its first final. Before anyone was
    heard it is an enrolment as ``--enroll`` makes. After, a voice the meeting already numbered
    (its centroid as near the sample as a final's must be, `SpeakerTracker.threshold`) is that
    speaker, named from its next final on; its earlier finals keep their label, which is
    returned (a rename of that label names them too). Otherwise it is a new known voice:
    appended after the others, so no "Speaker N" changes its number (N counts the unnamed
    only). A name the meeting has, or a voice already named, is refused (`EnrolmentError`).
    Returns the label the voice had, "" when it is new."""
    if voice.model != model:  # another model's similarity scale
        raise EnrolmentError(f"{voice.name!r} was enrolled with {voice.model}, not {model}")
    labels = [label(k) for k in range(len(tracker))]
    if voice.name in labels:
        raise EnrolmentError(f"{voice.name} is already a voice of this stream")
    if tracker.heard and labels:
        sims = tracker.similarities(voice.embedding)
        k = int(np.argmax(sims))
        if sims[k] >= tracker.threshold(voice.speech_s):
            if not is_auto_label(labels[k]):
                raise EnrolmentError(
                    f"that voice is {labels[k]}'s already (similarity {sims[k]:.2f})"
                )
            late_names[k] = voice.name
            return labels[k]
    if len(tracker) >= tracker.config.max_speakers:
        raise EnrolmentError(f"the stream knows {len(tracker)} voices, the most it labels")
    tracker.enrol(voice.name, voice.embedding, voice.speech_s)  # appended: no label changes
    return ""


def replace_late(
    tracker: SpeakerTracker, late_names: dict[int, str], model: str, voice: EnrolledVoice
) -> tuple[SpeakerTracker, dict[int, str], str]:
    """``voice`` enrolled in place of the meeting's voice of its name, if any (the server's
    ``POST /streams/ID/voices?name=Mary&replace=1``: a better sample): the old one taken out
    (`core.speaker_removal.forget_voice`), then the new one enrolled as `enrol_late` does, both
    on copies, so that a refusal (`EnrolmentError`: the new sample is another name's voice)
    leaves the meeting as it was. Returns the new tracker, late names and `enrol_late`'s
    label the voice had, for the labeller to take whole."""
    from streamcap.core.speaker_removal import forget_voice

    t, late = tracker.copy(), dict(late_names)
    forget_voice(t, late, voice.name)
    was = enrol_late(t, lambda k: late.get(k) or t.label(k), late, model, voice)
    return t, late, was


def is_auto_label(label: str) -> bool:
    """``label`` is one the labeller numbered ("Speaker 3"), not a person's name (names
    like it are refused: ``--enroll``, `server.voices`)."""
    return re.fullmatch(r"Speaker \d+", label) is not None
