"""recap drivers: workers that run recap cases (recap.case/1) on another system under test (SUT)
and speak the recap.worker/1 protocol (PROTOCOL.md) over their stdin/stdout.

Packages, in layer order (a package imports only those above it; scripts/check-layers.sh):
  case         recap.case/1 parsing and validation (mirrors harness/training/spec.cpp), no torch
  core/        framework-neutral: protocol, worker loop, errors, layers, observation, records,
               replies, the runner and the SUT base
  frameworks/  one package per framework (torch, megatron): how it builds, checkpoints and
               graphs a case
  mutants/     framework mutants: named monkeypatches of torch and megatron-core (no framework
               is imported until one is installed)
  __main__     the command line (recap-driver, python3 -m recap_drivers)
"""

PROTOCOL = "recap.worker/1"
__version__ = "0.1.0"
