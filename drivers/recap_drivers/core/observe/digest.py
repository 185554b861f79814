"""Mask digests as recap computes them (harness/runtime/dropout.h): bit i % 32 of uint32 word
i / 32 set iff element i is kept, bits past n zero, the words as little-endian bytes, FNV-1a 64
over those ceil(n / 32) * 4 bytes, written as 16 lower-case hex digits. The pure-Python functions
need no torch; pack_bits_torch and tensor_bytes import it when called."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when called, not with this module
    import torch

FNV_OFFSET = 1469598103934665603
FNV_PRIME = 1099511628211
MASK64 = (1 << 64) - 1


def fnv1a64(data: bytes, h: int = FNV_OFFSET) -> int:
    for b in data:
        h ^= b
        h = (h * FNV_PRIME) & MASK64
    return h


def pack_mask_bits(kept: bytes) -> bytes:
    """One byte per element (nonzero: kept) -> recap's packed uint32 words, little-endian bytes.
    Bit i % 32 of word i / 32 is element i, so byte j of the stream holds elements 8j .. 8j+7 with
    element 8j in bit 0."""
    n = len(kept)
    nwords = (n + 31) // 32
    out = bytearray(nwords * 4)
    for j in range(0, n, 8):
        byte = 0
        chunk = kept[j:j + 8]
        for k, v in enumerate(chunk):
            if v:
                byte |= 1 << k
        out[j // 8] = byte
    return bytes(out)


def mask_digest(kept: bytes) -> str:
    return "%016x" % fnv1a64(pack_mask_bits(kept))


def pack_bits_torch(kept: torch.Tensor) -> bytes:
    """pack_mask_bits() for a CPU uint8 tensor, vectorized."""
    import torch

    n = kept.numel()
    nwords = (n + 31) // 32
    padded = torch.zeros(nwords * 32, dtype=torch.int32)
    padded[:n] = (kept.reshape(-1) != 0).to(torch.int32)
    weights = torch.tensor([1 << k for k in range(8)], dtype=torch.int32)
    packed = (padded.view(-1, 8) * weights).sum(dim=1).to(torch.uint8)
    return tensor_bytes(packed)


def tensor_bytes(t: torch.Tensor) -> bytes:
    """Raw bytes of a CPU tensor, without numpy."""
    import torch

    t = t.contiguous()
    n = t.numel() * t.element_size()
    ba = bytearray(n)
    if n:
        dst = torch.frombuffer(ba, dtype=t.dtype)
        dst.copy_(t.reshape(-1))
    return bytes(ba)
