"""Decoder steps of several decodes in one pass: ``lean.py``'s layers over a ragged batch.

A one-token step is memory-bound: its cost is reading the decoder's weights (and the
106 MB output projection), not arithmetic. Rows of several decodes are therefore packed into
one ``(1, R, D)`` sequence (R = the sum of every row's new tokens, no padding): the embedding,
layer norms, linear layers and GELU are row-wise, so they run once for all rows and read the
weights once. Attention is the one part that mixes positions, and each row's keys/values are
its own (its cache, its window's encoder output) — reading them costs the same batched or not —
so attention runs row by row over the row's own :class:`~streamcap.decoding.lean.LeanCache`,
with exactly the mask, layout and kernel of a batch-1 step. Rows of different cache lengths,
token counts and encoder lengths (a shortened audio context) need no padding or masks.

The rows' projection onto the vocabulary (``project``) runs once for all rows too.

The numbers are not bit-identical to batch 1: a linear layer over R rows may block its sums
differently from one over a single row (a few ulps, ``scripts/bench_batching.py`` measures the
effect on logits), which is why the decoder loop (``batched.py``) re-decides close calls at
batch 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch.nn import functional as F

from streamcap.decoding.lean import LeanCache, LeanDecoder, self_attention, self_mask
from streamcap.decoding.step import DecoderStep


class Segment(NamedTuple):
    """New tokens of one row, appended to that row's own cache, over its own encoder output."""

    tokens: Sequence[int]
    cache: LeanCache
    enc: torch.Tensor  # (1, T, D); T may differ between rows


@torch.inference_mode()
def forward_packed(lean: LeanDecoder, segments: Sequence[Segment]) -> list[torch.Tensor]:
    """Hidden states (after the final layer norm) of every segment, each ``(n_b, D)``.

    Each segment's cache then holds its new keys/values, as after ``lean.forward``.
    """
    if not segments:
        return []
    embed = lean._embed
    device = embed.device
    starts = [s.cache.length for s in segments]
    sizes = [len(s.tokens) for s in segments]
    for start, n in zip(starts, sizes, strict=True):
        if n < 1:
            raise ValueError("every row needs at least one new token")
        if start + n > lean.max_len:
            raise ValueError(f"the decoder holds at most {lean.max_len} positions")
    offsets = [0]
    for n in sizes:
        offsets.append(offsets[-1] + n)
    ids = torch.tensor([[t for s in segments for t in s.tokens]], dtype=torch.long, device=device)
    positions = lean._positions
    pos = torch.cat([positions[a : a + n] for a, n in zip(starts, sizes, strict=True)])
    x = F.embedding(ids, embed) + pos
    cross = [lean._cross(s.cache, s.enc) for s in segments]
    masks = [self_mask(a, n, device) for a, n in zip(starts, sizes, strict=True)]
    heads, head_dim = lean.heads, lean.head_dim
    rows = list(zip(range(len(segments)), starts, sizes, offsets, masks, segments, strict=False))
    linear, layer_norm, sdpa = F.linear, F.layer_norm, F.scaled_dot_product_attention
    for i, p in enumerate(lean._params):
        h = layer_norm(x, *p.ln1)
        q_all = linear(h, *p.q) * p.scaling
        k_all = linear(h, *p.k)
        v_all = linear(h, *p.v)
        outs: list[torch.Tensor] = []
        for _, start, n, off, (mask, causal), seg in rows:
            shape = (1, n, heads, head_dim)
            end = start + n
            keys, values = seg.cache.keys, seg.cache.values
            q = q_all[:, off : off + n].view(shape).transpose(1, 2).contiguous()
            keys[i, :, :, start:end] = k_all[:, off : off + n].view(shape).transpose(1, 2)
            values[i, :, :, start:end] = v_all[:, off : off + n].view(shape).transpose(1, 2)
            o = self_attention(q, seg.cache, i, end, mask, causal)
            outs.append(o.transpose(1, 2).reshape(1, n, -1))
        x = x + linear(outs[0] if len(outs) == 1 else torch.cat(outs, 1), *p.o)

        h = layer_norm(x, *p.ln2)
        xq_all = linear(h, *p.xq) * p.xscaling
        outs = []
        for b, _, n, off, _, _ in rows:
            shape = (1, n, heads, head_dim)
            q = xq_all[:, off : off + n].view(shape).transpose(1, 2).contiguous()
            k, v = cross[b][i]
            o = sdpa(q, k, v, dropout_p=0.0, scale=1.0)
            outs.append(o.transpose(1, 2).reshape(1, n, -1))
        x = x + linear(outs[0] if len(outs) == 1 else torch.cat(outs, 1), *p.xo)

        h = layer_norm(x, *p.ln3)
        x = x + linear(F.gelu(linear(h, *p.fc1)), *p.fc2)
    for start, n, seg in zip(starts, sizes, segments, strict=True):
        seg.cache.length = start + n
    out = layer_norm(x, *lean._final_ln)[0]
    return [out[a:b] for a, b in zip(offsets, offsets[1:], strict=False)]


def twin_cache(lean: LeanDecoder, cache: LeanCache) -> LeanCache:
    """A second cache of the same row, sharing its cross-attention keys/values."""
    twin = lean.new_cache()
    twin.cross, twin.cross_of = cache.cross, cache.cross_of
    return twin


def project(step: DecoderStep, rows: torch.Tensor) -> torch.Tensor:
    """Full fp32 logits of ``rows`` (as ``DecoderStep.logits``), computed as ``W @ rows.T``.

    For a few rows that form is 2-3x faster than ``F.linear`` on this CPU (measured: 8 rows
    onto base's vocabulary ~9 ms against ~26 ms, 32 rows ~21 ms against ~34 ms; one row is
    ~10 ms either way); its sums differ by a few ulps, inside the batching difference the
    decoder's margin covers. One row keeps the batch-1 path.
    """
    if rows.shape[0] == 1:
        return step.logits(rows)
    proj = step.proj_out
    logits = torch.mm(proj.weight, rows.t()).t().float().contiguous()
    if proj.bias is not None:
        logits += proj.bias.float()
    return logits
