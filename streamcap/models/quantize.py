"""The int8 encoder (`--precision int8`): dynamically quantised Linear layers, on a CPU.

Whisper's encoder is one large batched pass whose time is in its Linear layers (attention
projections and the MLP); with int8 weights and activations quantised on the fly (fbgemm /
oneDNN VNNI kernels) it ran 0.45 s per 30 s window against 0.59 s in fp32 on a 2-core Intel
CPU (issue 22). The convolutions, layer norms and the decoder stay fp32. Exactness is defined
at this precision: the speculative decoder's output equals plain greedy `generate` on the
same int8 encoder's output (transformers' `generate` runs this same quantised module).

PyTorch marks `torch.ao.quantization` as deprecated in favour of torchao; it is what the torch
CPU wheel has, so its warnings are silenced here and the choice is reviewed when torch drops it.
"""

from __future__ import annotations

import warnings
from typing import Any


def int8_encoder(encoder: Any) -> Any:
    """`encoder` with its Linear layers replaced by dynamically quantised int8 ones (in place;
    the same module is returned)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.ao.quantization import quantize_dynamic

        return quantize_dynamic(encoder, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
