"""One package per framework: how that framework builds, checkpoints and graphs a case, on the
core (recap_drivers.core), which imports nothing from here.

  torch     torch's own modules, torch.utils.checkpoint, make_graphed_callables, torch.cuda.graph
  megatron  megatron-core's TransformerLayer, tensor_parallel.checkpoint, CudaGraphManager,
            FullCudaGraphWrapper, forward_backward_func
"""
