"""The runtime layer: a model on a device (the engine port and its registry), the inference
worker thread, live streams, clocks and the one pacer, offline transcription. Built on `core`;
used by `server` and `cli`.

Names are imported on first use (`streamcap._face`): an engine pulls in torch. ``replay`` (the
function) is not among them: its module has the same name; import it from
`streamcap.runtime.replay`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.runtime.clock import Clock as Clock
    from streamcap.runtime.clock import RealClock as RealClock
    from streamcap.runtime.clock import SimulatedClock as SimulatedClock
    from streamcap.runtime.costs import CostModel as CostModel
    from streamcap.runtime.costs import CostModelConfig as CostModelConfig
    from streamcap.runtime.decoder_threads import DecoderChoice as DecoderChoice
    from streamcap.runtime.decoder_threads import DecoderThreads as DecoderThreads
    from streamcap.runtime.decoder_threads import DecodeRun as DecodeRun
    from streamcap.runtime.decoder_threads import LoadFollowingDecode as LoadFollowingDecode
    from streamcap.runtime.decoder_threads import PlainDecode as PlainDecode
    from streamcap.runtime.decoder_threads import Preference as Preference
    from streamcap.runtime.decoder_threads import on_threads as on_threads
    from streamcap.runtime.encoder_threads import AdaptiveThreads as AdaptiveThreads
    from streamcap.runtime.encoder_threads import EncoderThreads as EncoderThreads
    from streamcap.runtime.encoder_threads import FixedThreads as FixedThreads
    from streamcap.runtime.encoder_threads import identical_across as identical_across
    from streamcap.runtime.engine import Engine as Engine
    from streamcap.runtime.engine_api import EncodedAudio as EncodedAudio
    from streamcap.runtime.engine_api import InferenceEngine as InferenceEngine
    from streamcap.runtime.engines import DEFAULT_ENGINE as DEFAULT_ENGINE
    from streamcap.runtime.engines import EngineFactory as EngineFactory
    from streamcap.runtime.engines import EngineOptions as EngineOptions
    from streamcap.runtime.engines import UnknownEngine as UnknownEngine
    from streamcap.runtime.engines import describe_engine as describe_engine
    from streamcap.runtime.engines import engine_names as engine_names
    from streamcap.runtime.engines import make_engine as make_engine
    from streamcap.runtime.engines import register_engine as register_engine
    from streamcap.runtime.file_labeller import FileLabeller as FileLabeller
    from streamcap.runtime.free_cores import FreeCores as FreeCores
    from streamcap.runtime.free_cores import OtherLoad as OtherLoad
    from streamcap.runtime.jobs import DecodeJob as DecodeJob
    from streamcap.runtime.jobs import JobOutcome as JobOutcome
    from streamcap.runtime.jobs import StreamStats as StreamStats
    from streamcap.runtime.jobs import WorkerStats as WorkerStats
    from streamcap.runtime.labeller import SpeakerLabeller as SpeakerLabeller
    from streamcap.runtime.scheduler import Scheduler as Scheduler
    from streamcap.runtime.stream import LiveStream as LiveStream
    from streamcap.runtime.transcribe import TranscribeOptions as TranscribeOptions
    from streamcap.runtime.transcribe import Transcription as Transcription
    from streamcap.runtime.worker import InferenceWorker as InferenceWorker
    from streamcap.runtime.worker_api import ModelInfo as ModelInfo
    from streamcap.runtime.worker_api import ModelName as ModelName
    from streamcap.runtime.worker_api import Placed as Placed
    from streamcap.runtime.worker_api import StreamWorker as StreamWorker
    from streamcap.runtime.worker_api import Worker as Worker
    from streamcap.runtime.worker_api import WorkerLifecycle as WorkerLifecycle
    from streamcap.runtime.worker_api import WorkerStatus as WorkerStatus
    from streamcap.runtime.worker_status import BatchFigures as BatchFigures
    from streamcap.runtime.worker_status import RemoteStatus as RemoteStatus
    from streamcap.runtime.worker_status import ReplicaStatus as ReplicaStatus

#: public name -> the module of this package that defines it
_EXPORTS = {
    "Clock": "clock",
    "RealClock": "clock",
    "SimulatedClock": "clock",
    "CostModel": "costs",
    "CostModelConfig": "costs",
    "DecodeRun": "decoder_threads",
    "DecoderThreads": "decoder_threads",
    "DecoderChoice": "decoder_threads",
    "LoadFollowingDecode": "decoder_threads",
    "PlainDecode": "decoder_threads",
    "Preference": "decoder_threads",
    "on_threads": "decoder_threads",
    "AdaptiveThreads": "encoder_threads",
    "EncoderThreads": "encoder_threads",
    "FixedThreads": "encoder_threads",
    "identical_across": "encoder_threads",
    "Engine": "engine",
    "EncodedAudio": "engine_api",
    "InferenceEngine": "engine_api",
    "DEFAULT_ENGINE": "engines",
    "EngineFactory": "engines",
    "EngineOptions": "engines",
    "UnknownEngine": "engines",
    "describe_engine": "engines",
    "engine_names": "engines",
    "make_engine": "engines",
    "register_engine": "engines",
    "FileLabeller": "file_labeller",
    "FreeCores": "free_cores",
    "OtherLoad": "free_cores",
    "DecodeJob": "jobs",
    "JobOutcome": "jobs",
    "StreamStats": "jobs",
    "WorkerStats": "jobs",
    "SpeakerLabeller": "labeller",
    "Scheduler": "scheduler",
    "LiveStream": "stream",
    "TranscribeOptions": "transcribe",
    "Transcription": "transcribe",
    "InferenceWorker": "worker",
    "ModelInfo": "worker_api",
    "ModelName": "worker_api",
    "Placed": "worker_api",
    "StreamWorker": "worker_api",
    "Worker": "worker_api",
    "WorkerLifecycle": "worker_api",
    "WorkerStatus": "worker_api",
    "BatchFigures": "worker_status",
    "RemoteStatus": "worker_status",
    "ReplicaStatus": "worker_status",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
