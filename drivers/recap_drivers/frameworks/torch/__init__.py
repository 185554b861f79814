"""The PyTorch SUT: recap cases run on torch's own modules, checkpointing and CUDA graphs.

  sut     TorchSUT: what torch runs (capabilities, the skip policy)
  runner  TorchRunner: per-layer graphs (make_graphed_callables), full-iteration (torch.cuda.graph)
  graphs  where in make_graphed_callables a graph or a failure is (its frames; imports no torch)
"""
