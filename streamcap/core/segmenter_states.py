"""The segmenter's states and their transitions, as a table (like the policy's, and h11's).

    SILENCE --TRIGGER--> PENDING --CONFIRM--> SPEECH --END--> SILENCE
    PENDING --DISCARD--> SILENCE                    (a burst too short to be speech)
    SPEECH --SPLIT--> SPEECH                        (a monologue cut at `max_utterance_s`: its
                                                     voiced rest is the next utterance)
    SILENCE, PENDING, SPEECH --FLUSH--> SILENCE     (the end of the stream)

- TRIGGER: `start_ratio` of the frames of the start window are voiced: a candidate opens,
  with its pre-roll.
- CONFIRM: the candidate has `min_speech_ms` of voice: `SpeechStart` goes out, and its audio.
- DISCARD: `hangover_ms` of silence before that: the candidate is dropped, nothing went out.
- END: `hangover_ms` of silence in speech (`SpeechEnd` "silence"), or a split in a pause or
  with an unvoiced rest (`SpeechEnd` "max_length").
- SPLIT: a split whose rest holds voice: `SpeechEnd` "max_length", then at once the next
  `SpeechStart`.
- FLUSH: `Segmenter.flush`: an utterance in speech ends ("flush"); a candidate is dropped.

The segmenter (`core.segmenter`) changes its state only with `StateMachine.fire`, so an event
its table does not hold raises `TransitionError` where the rule breaks.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from streamcap.core.state_machine import StateMachine


class SegmenterState(enum.Enum):
    SILENCE = "silence"
    PENDING = "pending"  # a candidate utterance, not yet long enough to be speech
    SPEECH = "speech"


class SegmenterEvent(enum.Enum):
    TRIGGER = "trigger"
    CONFIRM = "confirm"
    DISCARD = "discard"
    END = "end"
    SPLIT = "split"
    FLUSH = "flush"


_S, _E = SegmenterState, SegmenterEvent

SEGMENTER_TRANSITIONS: Mapping[SegmenterState, Mapping[SegmenterEvent, SegmenterState]] = {
    _S.SILENCE: {_E.TRIGGER: _S.PENDING, _E.FLUSH: _S.SILENCE},
    _S.PENDING: {_E.CONFIRM: _S.SPEECH, _E.DISCARD: _S.SILENCE, _E.FLUSH: _S.SILENCE},
    _S.SPEECH: {_E.END: _S.SILENCE, _E.SPLIT: _S.SPEECH, _E.FLUSH: _S.SILENCE},
}


def segmenter_machine() -> StateMachine[SegmenterState, SegmenterEvent]:
    return StateMachine(SEGMENTER_TRANSITIONS, SegmenterState.SILENCE)
