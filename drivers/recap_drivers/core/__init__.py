"""The framework-neutral core of the drivers: what every system under test shares.

  protocol   recap.worker/1 framing (header line + raw frames), no torch
  worker     the request loop; it tells a refused request from a driver bug by class (errors)
  errors     the public exception classes
  layers     recap's layer kinds as torch modules (names and math as recap's)
  observe/   digests (no torch), the mask observer and positions, the graph observer
  records    run and step records, the request's data frames
  replies    the observation reply: frames, the skip policy, planted driver faults
  runner     one execution of a case: steps, failure-and-recover, memory figures
  sut        the SUT base: device set-up, the run request, cleaning up between cases
  cuda_errors, tracebacks, leaks   CUDA error names, failure locators, leak tracing
  worker_faults  planted worker faults (RECAP_WORKER_FAULT): a lost context, a SIGKILL, memory

frameworks/ builds on this package; nothing here imports a framework module.
"""
