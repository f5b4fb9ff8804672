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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from streamcap.core.constants import SAMPLE_RATE
from streamcap.core.speakers import SpeakerConfig, config_for, mean_embedding
from streamcap.errors import UserError

if TYPE_CHECKING:
    from streamcap.speakers.registry import Encoder

#: The least sound (seconds, silence trimmed) a sample must hold.
MIN_SAMPLE_S = 2.0
#: The most of a file that is read (a longer one: its start).
MAX_SAMPLE_S = 60.0
#: A frame is sound when it is within this many dB of the sample's loudest frame.
_TRIM_DB = 30.0
_FRAME_S = 0.03


class EnrolmentError(UserError):
    """A sample that cannot name a voice (too short, silent); the message says which file."""


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
    sound = trim_silence(audio)
    if sound.size < MIN_SAMPLE_S * SAMPLE_RATE:
        raise EnrolmentError(
            f"--enroll {name}={path}: {sound.size / SAMPLE_RATE:.1f} s of sound, at least "
            f"{MIN_SAMPLE_S:g} s needed (5-30 s of {name} speaking alone names the voice best)"
        )
    return VoiceSample(name, sound, str(path))


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
