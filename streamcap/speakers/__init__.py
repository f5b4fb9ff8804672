"""Speaker embeddings from the voice: resemblyzer's GE2E voice encoder
(`voice_encoder.VoiceEncoder`, the default) and CAM++ (`campplus.CampplusEncoder`), by name
(`registry`).

A building block of the runtime, like `streamcap.decoding`: torch is imported by
`streamcap.speakers.voice_encoder`, not here (its names are imported on first use,
`streamcap._face`), so importing the package stays light. The pure clustering and change-point
rules are `streamcap.core.speakers`; the caption stage that labels a live stream's finals is
`streamcap.runtime.labeller`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.speakers.campplus import CampplusEncoder as CampplusEncoder
    from streamcap.speakers.campplus import CampplusMissing as CampplusMissing
    from streamcap.speakers.registry import SPEAKER_MODELS as SPEAKER_MODELS
    from streamcap.speakers.registry import Encoder as Encoder
    from streamcap.speakers.registry import default_model as default_model
    from streamcap.speakers.registry import encoder_for as encoder_for
    from streamcap.speakers.registry import load_encoder as load_encoder
    from streamcap.speakers.voice_encoder import VoiceEncoder as VoiceEncoder
    from streamcap.speakers.voice_encoder import shared_encoder as shared_encoder
    from streamcap.speakers.voice_encoder import weights_path as weights_path
    from streamcap.speakers.wheel_files import wheel_file as wheel_file

#: public name -> the module of this package that defines it
_EXPORTS = {
    "CampplusEncoder": "campplus",
    "CampplusMissing": "campplus",
    "Encoder": "registry",
    "SPEAKER_MODELS": "registry",
    "default_model": "registry",
    "encoder_for": "registry",
    "load_encoder": "registry",
    "VoiceEncoder": "voice_encoder",
    "shared_encoder": "voice_encoder",
    "weights_path": "voice_encoder",
    "wheel_file": "wheel_files",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
