"""The drivers' public exception classes. core.worker answers a request that raises one of the
refusals (RequestError, CaseError) with its message, and anything else as an internal error."""

from __future__ import annotations

from ..case import CaseError

__all__ = ["BuildFailure", "CaseError", "GroupLost", "RequestError", "SkipCase", "RunawayBackward", "REFUSALS"]


class RequestError(Exception):
    """A run request that cannot be served (bad case, missing frames): an error reply."""


class SkipCase(Exception):
    """The framework refuses the case while it is being built (one line): a skipped reply."""


class BuildFailure(Exception):
    """The framework raised while building the model, not a documented refusal: a failed run in
    phase "build" (records.build_failure_record), a finding rather than a skip."""

    def __init__(self, cause: BaseException, layer: str):
        super().__init__(str(cause))
        self.cause = cause
        self.layer = layer


class RunawayBackward(RuntimeError):
    """A step's backward ran far more ops than its forward did: a backward that would not end (a
    recompute that reaches itself again through its own output re-enters without end, each level
    deeper on a new autograd thread with its own cuBLAS workspace, until the device runs out of
    memory, results/FINDINGS.md M7). Raised from the observer: such a run is already broken, and a
    named failure in a second beats an out-of-memory error, which judges nothing, a minute later."""


class GroupLost(Exception):
    """A rank group (core/ranks.py) lost a rank, or its ranks answered a request differently: the
    worker answers with an error reply (one line naming the rank) and exits with status 3, since
    its collectives can no longer be trusted to be in step."""


# The exceptions a request's reply quotes as they are (the others are "internal error: ...").
REFUSALS = (RequestError, CaseError)
