"""recap drivers: workers that run recap cases (recap.case/1) on another system under test (SUT)
and speak the recap.worker/1 protocol (PROTOCOL.md) over their stdin/stdout.

Modules:
  protocol  framing (header line + raw frames), SUT-independent, no torch
  case      recap.case/1 parsing and validation (mirrors harness/training/spec.cpp), no torch
  worker    the request loop shared by every SUT
  layers    recap's layer kinds built from torch modules/functions (names and math as recap's)
  observe   dropout-mask observation (a TorchDispatchMode), mask digests, memory figures
  torch_sut the PyTorch SUT: eager, per-layer (make_graphed_callables), full-iteration (torch.cuda.graph)

A Megatron driver is meant to be a sibling module (megatron_sut) reusing protocol, case, worker,
layers (where Megatron's modules are not used) and observe.
"""

PROTOCOL = "recap.worker/1"
__version__ = "0.1.0"
