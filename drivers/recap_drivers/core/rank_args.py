"""A rank group's command-line and environment values (core/ranks.py), read without torch so
that a bad value is refused (exit 2, one line) before anything is imported."""

from __future__ import annotations

import os
from typing import Tuple

TIMEOUT_ENV = "RECAP_RANK_TIMEOUT_S"
MAX_RANKS = 64


def parse_ranks(text: str) -> Tuple[int, str]:
    """(N, "") for --ranks N (2 <= N <= MAX_RANKS), else (0, one line)."""
    try:
        n = int(text)
    except ValueError:
        return 0, f"--ranks {text!r}: expected an integer from 2 to {MAX_RANKS}"
    if n < 2 or n > MAX_RANKS:
        return 0, f"--ranks {n}: expected an integer from 2 to {MAX_RANKS} (one rank is the plain worker)"
    return n, ""


def parse_timeout() -> Tuple[float, str]:
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return 120.0, ""
    try:
        t = float(text)
    except ValueError:
        t = -1.0
    if not t > 0:
        return 0.0, f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds"
    return t, ""
