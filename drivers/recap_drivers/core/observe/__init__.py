"""Observation without changing what the framework does.

  digest  mask digests as recap computes them (no torch)
  masks   MaskObserver: the dropout masks a run draws, its position, the runaway-backward check
  graphs  GraphObserver: CUDA graph captures and replays by label; graph-pool bytes
"""
