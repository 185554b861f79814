"""The megatron-core SUT: recap cases run the way a Megatron user runs them.

  api        the megatron-core names used, version checks, documented refusals
  model      recap's layers as Megatron modules (TransformerLayer, GraphableMegatronModule)
  graphs     where Megatron draws and captures: site resolver, failure locator, capture spans, RNG
  runner     MegatronRunner: steps through forward_backward_func, CudaGraphManager, FullCudaGraphWrapper
  sut        MegatronSUT: capabilities, the skip policy, the configs of a case, resets between cases
  pool_uses  graph-pool uses Megatron never gives back (finding M6)


What is Megatron's own code here (read in megatron/core of 0.15.3 and 0.19.2):
  block      megatron.core.transformer.TransformerLayer from get_gpt_layer_local_spec() (no
             TransformerEngine), configured through TransformerConfig as a user does: hidden and
             attention dropout, recompute_granularity / recompute_modules (selective: recap's
             attn_core -> "core_attn", mlp -> "mlp", norm -> "layernorm"), cuda_graph_impl and the
             graph scope fields of the version. recap's "full" checkpoint of a block is
             recompute_granularity "full", method "uniform", one layer per unit: what
             TransformerBlock._checkpointed_forward does, tensor_parallel.checkpoint around the layer.
  smaller    recap's layer kinds (core/layers.py, torch modules) checkpointed with megatron-core's
  kinds      tensor_parallel.checkpoint (CheckpointFunction), attention dropout drawn inside
             get_cuda_rng_tracker().fork() as DotProductAttention draws it, hidden dropouts from the
             default generator as bias_dropout_add draws them; a graphed one is a
             GraphableMegatronModule, so Megatron's CudaGraphManager captures it.
  RNG        tensor_parallel.model_parallel_cuda_manual_seed(seed, use_cudagraphable_rng=...) per
             case; recap's generator "graph-safe" is use_cudagraphable_rng=True, "host" False.
  steps      get_forward_backward_func() (forward_backward_no_pipelining on one rank) runs each
             step's microbatches, forward then backward each; calculate_per_token_loss with one
             token per microbatch keeps recap's summed gradients (no 1/num_microbatches).
  per-layer  cuda_graph_impl "local": step 0 runs eagerly and records (CudaGraphManager), and at its
             end forward_backward_func calls create_cudagraphs(), which warms each graph up
             cuda_graph_warmup_steps (= the case's warmup) times with torch.autograd.grad and
             captures it; later steps replay. One graph per layer serves every microbatch (one
             pipeline stage: reuse_cudagraphs, one mempool).
  full-      0.15.3: cuda_graph_impl "local" + cuda_graph_scope "full_iteration"; 0.19.2:
  iteration  cuda_graph_impl "full_iteration"; FullCudaGraphWrapper(forward_backward_func,
             cuda_graph_warmup_steps = warmup): steps 0 .. W-1 eager, step W captures and replays.
  SGD        p -= lr * grad after each step, outside the graphs (Megatron's optimizer is too).

The harness's choices (not Megatron's): the RNG states are restored after create_cudagraphs() to
what they were when the step's backwards ended (finalize_model_grads_func, a user hook Megatron
calls right before it), so its warmup draws do not shift the replays' masks against the eager twin
(as the torch driver does around make_graphed_callables); Megatron's class-level graph state
(_CudagraphGlobalRecord, CudaGraphManager pools, FullCudaGraphWrapper, StaticBufferLoader) is
reset between cases with delete_cuda_graphs() and by clearing the wrapper's dicts, and 0.16-0.18's
buffer-reuse pool, which delete_cuda_graphs() keeps, is emptied (graphs.reset_buffer_reuse, M10); the graph-pool
uses Megatron takes and never releases are given back (pool_uses.py, finding M6).
"""
