"""Pure logic: no threads, clocks, models or sockets. Tests drive every rule here directly.

- `stream`: one stream as a sans-I/O object (`StreamProtocol`), what `LiveStream` drives.
- `segmenter`: the VAD segmenter, frames in, events out (the VAD is injected).
- `policy`: when to decode, what to show as partial and final.
- `text`: word-level text helpers and the one hallucination guard.
- `captions`: caption events and the one sequencer (`CaptionLog`).

The names below are the layer's face, for users: each is imported from its module on first use
(`streamcap._face`). Code inside streamcap imports from the defining module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.core.capacity import Admission as Admission
    from streamcap.core.capacity import CapacityConfig as CapacityConfig
    from streamcap.core.capacity import Load as Load
    from streamcap.core.captions import Caption as Caption
    from streamcap.core.captions import CaptionEvent as CaptionEvent
    from streamcap.core.captions import CaptionLog as CaptionLog
    from streamcap.core.cea608 import CHARSET as CHARSET
    from streamcap.core.cea608 import ROW_CHARS as ROW_CHARS
    from streamcap.core.cea608 import RollUp608 as RollUp608
    from streamcap.core.cea608 import RollUpConfig as RollUpConfig
    from streamcap.core.cea608 import screen_pairs as screen_pairs
    from streamcap.core.cea608 import splits_end_of_caption as splits_end_of_caption
    from streamcap.core.cea608 import to_608 as to_608
    from streamcap.core.constants import SAMPLE_RATE as SAMPLE_RATE
    from streamcap.core.crosstalk import CrossTalk as CrossTalk
    from streamcap.core.crosstalk import CrossTalkConfig as CrossTalkConfig
    from streamcap.core.crosstalk import Heard as Heard
    from streamcap.core.crosstalk import Released as Released
    from streamcap.core.crosstalk_measures import similarity as similarity
    from streamcap.core.crosstalk_measures import speech_level_db as speech_level_db
    from streamcap.core.decode_types import DecodeResult as DecodeResult
    from streamcap.core.decode_types import DecodeStats as DecodeStats
    from streamcap.core.decode_types import DecodingOptions as DecodingOptions
    from streamcap.core.decode_types import JobInputs as JobInputs
    from streamcap.core.decode_types import PromptText as PromptText
    from streamcap.core.decode_types import WordTiming as WordTiming
    from streamcap.core.live_config import LiveConfig as LiveConfig
    from streamcap.core.load_shed import LoadShedConfig as LoadShedConfig
    from streamcap.core.load_shed import LoadShedder as LoadShedder
    from streamcap.core.load_shed import Pace as Pace
    from streamcap.core.load_shed import PaceEvent as PaceEvent
    from streamcap.core.load_shed import behind_s as behind_s
    from streamcap.core.pacing import Backoff as Backoff
    from streamcap.core.pacing import CloseVerdict as CloseVerdict
    from streamcap.core.pacing import SendPacer as SendPacer
    from streamcap.core.pacing import after_close as after_close
    from streamcap.core.policy import CaptionPolicy as CaptionPolicy
    from streamcap.core.policy_config import PolicyConfig as PolicyConfig
    from streamcap.core.policy_window import DecodeRequest as DecodeRequest
    from streamcap.core.policy_window import DroppedFinal as DroppedFinal
    from streamcap.core.policy_window import Step as Step
    from streamcap.core.resume import ResumeBuffer as ResumeBuffer
    from streamcap.core.resume import Session as Session
    from streamcap.core.resume import resume_position as resume_position
    from streamcap.core.segmenter import Segmenter as Segmenter
    from streamcap.core.segmenter import SegmenterConfig as SegmenterConfig
    from streamcap.core.segmenter import SpeechAudio as SpeechAudio
    from streamcap.core.segmenter import SpeechEnd as SpeechEnd
    from streamcap.core.segmenter import SpeechStart as SpeechStart
    from streamcap.core.segmenter import Utterance as Utterance
    from streamcap.core.segmenter import VadFn as VadFn
    from streamcap.core.segmenter import segment_audio as segment_audio
    from streamcap.core.speaker_changes import ChangePoint as ChangePoint
    from streamcap.core.speaker_changes import change_point as change_point
    from streamcap.core.speaker_changes import sentence_spans as sentence_spans
    from streamcap.core.speaker_changes import side_windows as side_windows
    from streamcap.core.speaker_partials import name_partial as name_partial
    from streamcap.core.speaker_partials import partial_least_s as partial_least_s
    from streamcap.core.speaker_removal import forget_voice as forget_voice
    from streamcap.core.speakers import MODEL_THRESHOLDS as MODEL_THRESHOLDS
    from streamcap.core.speakers import SpeakerConfig as SpeakerConfig
    from streamcap.core.speakers import SpeakerTracker as SpeakerTracker
    from streamcap.core.speakers import config_for as config_for
    from streamcap.core.stream import DecodeOrder as DecodeOrder
    from streamcap.core.stream import StreamEnded as StreamEnded
    from streamcap.core.stream import StreamOutput as StreamOutput
    from streamcap.core.stream import StreamProtocol as StreamProtocol
    from streamcap.core.text import GuardConfig as GuardConfig

#: public name -> the module of this package that defines it
_EXPORTS = {
    "Admission": "capacity",
    "CapacityConfig": "capacity",
    "Load": "capacity",
    "Caption": "captions",
    "CaptionEvent": "captions",
    "CaptionLog": "captions",
    "CHARSET": "cea608",
    "ROW_CHARS": "cea608",
    "RollUp608": "cea608",
    "RollUpConfig": "cea608",
    "screen_pairs": "cea608",
    "splits_end_of_caption": "cea608",
    "to_608": "cea608",
    "SAMPLE_RATE": "constants",
    "CrossTalk": "crosstalk",
    "CrossTalkConfig": "crosstalk",
    "Heard": "crosstalk",
    "Released": "crosstalk",
    "similarity": "crosstalk_measures",
    "speech_level_db": "crosstalk_measures",
    "DecodeResult": "decode_types",
    "DecodeStats": "decode_types",
    "DecodingOptions": "decode_types",
    "JobInputs": "decode_types",
    "PromptText": "decode_types",
    "WordTiming": "decode_types",
    "LiveConfig": "live_config",
    "LoadShedConfig": "load_shed",
    "LoadShedder": "load_shed",
    "Pace": "load_shed",
    "PaceEvent": "load_shed",
    "behind_s": "load_shed",
    "Backoff": "pacing",
    "CloseVerdict": "pacing",
    "SendPacer": "pacing",
    "after_close": "pacing",
    "CaptionPolicy": "policy",
    "PolicyConfig": "policy_config",
    "DecodeRequest": "policy_window",
    "DroppedFinal": "policy_window",
    "Step": "policy_window",
    "ResumeBuffer": "resume",
    "Session": "resume",
    "resume_position": "resume",
    "Segmenter": "segmenter",
    "SegmenterConfig": "segmenter",
    "SpeechAudio": "segmenter",
    "SpeechEnd": "segmenter",
    "SpeechStart": "segmenter",
    "Utterance": "segmenter",
    "VadFn": "segmenter",
    "segment_audio": "segmenter",
    "ChangePoint": "speaker_changes",
    "change_point": "speaker_changes",
    "sentence_spans": "speaker_changes",
    "side_windows": "speaker_changes",
    "name_partial": "speaker_partials",
    "partial_least_s": "speaker_partials",
    "forget_voice": "speaker_removal",
    "MODEL_THRESHOLDS": "speakers",
    "SpeakerConfig": "speakers",
    "SpeakerTracker": "speakers",
    "config_for": "speakers",
    "DecodeOrder": "stream",
    "StreamEnded": "stream",
    "StreamOutput": "stream",
    "StreamProtocol": "stream",
    "GuardConfig": "text",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
