"""Whisper's decoder stack run by hand over a preallocated KV cache.

A one-token step through transformers' ``WhisperDecoder`` spends most of its ~11 ms on this
CPU in Python and bookkeeping (mask building, cache objects, ``torch.cat`` growing the cache,
copies to make transposed tensors contiguous), not in arithmetic (~2 ms). This module runs the
same weights through the same torch ops in the same order, so the hidden states are bit for
bit those of the transformers modules (``tests/decoding/test_lean.py`` checks it), with
none of that:

- self-attention keys/values go into one buffer per layer sized for Whisper's 448 positions;
  a step writes its rows in place and cropping a rejected draft is moving a length;
- the cross-attention keys/values of a window are computed once per window and kept as the
  strided views the projection returns (no ``contiguous`` copy of 2 x 6 x 1500 x 512 floats),
  for as long as that encoder output lives: every decode of the window (a final's decode, then
  its word-timing pass, `decoding.alignment`) shares them.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch.nn import functional as F

_Cross = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (1, H, T, d)


class LeanCache:
    """Keys/values of one decode: self-attention rows in place, cross-attention per window."""

    def __init__(self, layers: int, heads: int, head_dim: int, max_len: int, like: torch.Tensor):
        shape = (layers, 1, heads, max_len, head_dim)
        self.keys = torch.empty(shape, dtype=like.dtype, device=like.device)
        self.values = torch.empty(shape, dtype=like.dtype, device=like.device)
        self.length = 0
        self.cross: _Cross | None = None
        self.cross_of: torch.Tensor | None = None  # the encoder output ``cross`` was made from

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, n: int) -> None:
        """Keep the first ``n`` positions, or drop ``-n`` positions when ``n`` is negative."""
        self.length = max(0, self.length + n) if n < 0 else min(self.length, n)


class CrossCapture:
    """Cross-attention logits (pre-softmax, fp32) of chosen heads, kept during one forward.

    Word timing (`decoding.alignment`) needs a few heads' attention over the audio's positions
    only, softmaxed there: so the logits ``q . k`` of those heads, rows ``first_row:`` and the
    first ``frames`` encoder positions, are computed on the side (a few small matmuls) while
    the layer itself still runs its fused attention, its hidden states unchanged.
    """

    def __init__(self, heads: Mapping[int, Sequence[int]], frames: int, first_row: int = 0):
        self.heads = {int(layer): [int(h) for h in hs] for layer, hs in heads.items() if hs}
        self.frames = frames
        self.first_row = first_row
        self.logits: dict[int, torch.Tensor] = {}  # layer -> (len(heads), rows, frames)

    def take(self, layer: int, q: torch.Tensor, k: torch.Tensor) -> None:
        """Keep the chosen heads of ``q`` (1, H, n, d; already scaled) against ``k``."""
        hs = self.heads[layer]
        qh = q[0, hs, self.first_row :].float()
        kh = k[0, hs, : self.frames].float()
        self.logits[layer] = qh @ kh.transpose(-1, -2)

    def stacked(self) -> torch.Tensor:
        """Every kept head, in layer then head order: (heads, rows, frames)."""
        return torch.cat([self.logits[layer] for layer in sorted(self.logits)])


def supports(decoder: Any) -> bool:
    """True for decoders laid out like transformers' ``WhisperDecoder`` (pre-norm, GELU)."""
    try:
        layer = decoder.layers[0]
        act = getattr(layer, "activation_fn", None)
        return (
            hasattr(layer.self_attn, "scaling")
            and hasattr(layer.encoder_attn, "q_proj")
            and hasattr(decoder, "embed_positions")
            and type(act).__name__ == "GELUActivation"
            and getattr(act, "act", None) is F.gelu
        )
    except (AttributeError, IndexError, TypeError):
        return False


def self_mask(start: int, n: int, device: torch.device) -> tuple[torch.Tensor | None, bool]:
    """The self-attention mask of ``n`` new tokens after ``start`` cached ones, as transformers
    builds it: none for one query; ``is_causal`` for a prefill into an empty cache; otherwise a
    boolean mask (query i sees the cached positions and the new positions <= i)."""
    if n > 1 and start == 0:
        return None, True
    if n > 1:
        end = start + n
        q_pos = torch.arange(start, end, device=device)[:, None]
        return (q_pos >= torch.arange(end, device=device)[None, :]).view(1, 1, n, end), False
    return None, False


def self_attention(
    q: torch.Tensor,
    cache: LeanCache,
    layer: int,
    end: int,
    mask: torch.Tensor | None,
    causal: bool,
) -> torch.Tensor:
    """Queries ``q`` (1, H, n, d; scaled) over ``layer``'s cached keys/values up to ``end``."""
    return F.scaled_dot_product_attention(
        q,
        cache.keys[layer, :, :, :end],
        cache.values[layer, :, :, :end],
        attn_mask=mask,
        dropout_p=0.0,
        scale=1.0,
        is_causal=causal,
    )


class _Layer(NamedTuple):
    """One decoder layer's parameters, fetched once (module calls cost more than the math)."""

    ln1: tuple[tuple[int, ...], torch.Tensor, torch.Tensor, float]
    q: tuple[torch.Tensor, torch.Tensor | None]
    k: tuple[torch.Tensor, torch.Tensor | None]
    v: tuple[torch.Tensor, torch.Tensor | None]
    o: tuple[torch.Tensor, torch.Tensor | None]
    scaling: float
    ln2: tuple[tuple[int, ...], torch.Tensor, torch.Tensor, float]
    xq: tuple[torch.Tensor, torch.Tensor | None]
    xo: tuple[torch.Tensor, torch.Tensor | None]
    xscaling: float
    ln3: tuple[tuple[int, ...], torch.Tensor, torch.Tensor, float]
    fc1: tuple[torch.Tensor, torch.Tensor | None]
    fc2: tuple[torch.Tensor, torch.Tensor | None]


def _ln(m: Any) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor, float]:
    return (tuple(m.normalized_shape), m.weight, m.bias, float(m.eps))


def _lin(m: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    return (m.weight, m.bias)


class LeanDecoder:
    """Runs ``WhisperDecoder``'s layers (weights shared, nothing copied) for one token row set."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        first = decoder.layers[0].self_attn
        self.heads: int = int(first.num_heads)
        self.head_dim: int = int(first.head_dim)
        self.max_len: int = int(decoder.embed_positions.weight.shape[0])
        self.layers = list(decoder.layers)
        self._params = [
            _Layer(
                _ln(layer.self_attn_layer_norm),
                _lin(layer.self_attn.q_proj),
                _lin(layer.self_attn.k_proj),
                _lin(layer.self_attn.v_proj),
                _lin(layer.self_attn.out_proj),
                float(layer.self_attn.scaling),
                _ln(layer.encoder_attn_layer_norm),
                _lin(layer.encoder_attn.q_proj),
                _lin(layer.encoder_attn.out_proj),
                float(layer.encoder_attn.scaling),
                _ln(layer.final_layer_norm),
                _lin(layer.fc1),
                _lin(layer.fc2),
            )
            for layer in self.layers
        ]
        self._embed = decoder.embed_tokens.weight
        self._positions = decoder.embed_positions.weight
        self._final_ln = _ln(decoder.layer_norm)
        #: cross-attention keys/values per live encoder output (id -> (weak ref, keys/values))
        self._windows: dict[int, tuple[weakref.ref[torch.Tensor], _Cross]] = {}

    @torch.inference_mode()
    def new_cache(self) -> LeanCache:
        return LeanCache(len(self.layers), self.heads, self.head_dim, self.max_len, self._embed)

    def _cross(self, cache: LeanCache, enc: torch.Tensor) -> _Cross:
        if cache.cross is None or cache.cross_of is not enc:
            kept = self._windows.get(id(enc))
            if kept is not None and kept[0]() is enc:
                cache.cross = kept[1]
            else:
                shape = (enc.shape[0], -1, self.heads, self.head_dim)
                cache.cross = [
                    (
                        layer.encoder_attn.k_proj(enc).view(shape).transpose(1, 2),
                        layer.encoder_attn.v_proj(enc).view(shape).transpose(1, 2),
                    )
                    for layer in self.layers
                ]
                key, windows = id(enc), self._windows

                def forget(_: weakref.ref[torch.Tensor]) -> None:
                    windows.pop(key, None)

                # forgotten when the encoder output is freed (the keys/values hold no ref to it)
                windows[key] = (weakref.ref(enc, forget), cache.cross)
            cache.cross_of = enc
        return cache.cross

    @torch.inference_mode()
    def forward(
        self,
        tokens: Sequence[int],
        cache: LeanCache,
        enc: torch.Tensor,
        capture: CrossCapture | None = None,
    ) -> torch.Tensor:
        """Hidden states (after the final layer norm) of ``tokens`` appended to the cache;
        ``capture`` also keeps chosen heads' cross-attention logits (same hidden states)."""
        n = len(tokens)
        start = cache.length
        end = start + n
        if end > self.max_len:
            raise ValueError(f"the decoder holds at most {self.max_len} positions")
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self._embed.device)
        x = F.embedding(ids, self._embed) + self._positions[start:end]
        cross = self._cross(cache, enc)
        mask, causal = self_mask(start, n, x.device)
        shape = (1, n, self.heads, self.head_dim)
        keys, values = cache.keys, cache.values
        linear, layer_norm, sdpa = F.linear, F.layer_norm, F.scaled_dot_product_attention
        for i, p in enumerate(self._params):
            h = layer_norm(x, *p.ln1)
            q = (linear(h, *p.q) * p.scaling).view(shape).transpose(1, 2).contiguous()
            keys[i, :, :, start:end] = linear(h, *p.k).view(shape).transpose(1, 2)
            values[i, :, :, start:end] = linear(h, *p.v).view(shape).transpose(1, 2)
            o = self_attention(q, cache, i, end, mask, causal)
            x = x + linear(o.transpose(1, 2).reshape(1, n, -1), *p.o)

            h = layer_norm(x, *p.ln2)
            q = (linear(h, *p.xq) * p.xscaling).view(shape).transpose(1, 2).contiguous()
            k, v = cross[i]
            if capture is not None and i in capture.heads:
                capture.take(i, q, k)
            o = sdpa(q, k, v, dropout_p=0.0, scale=1.0)
            x = x + linear(o.transpose(1, 2).reshape(1, n, -1), *p.xo)

            h = layer_norm(x, *p.ln3)
            x = x + linear(F.gelu(linear(h, *p.fc1)), *p.fc2)
        cache.length = end
        return layer_norm(x, *self._final_ln)[0]
