// `recap worker`: recap's own runtime served through recap.worker/1, as a framework's driver is
// (drivers/PROTOCOL.md), so the protocol is tested end to end without a GPU or a framework.
//
// recap derives a case's parameters and data from its seeds (models::init_values,
// Trainer::fresh_values): the `param` / `input` / `target` frames a client sends are not needed
// and are ignored. The observation carries, beyond the protocol's common fields, recap's RNG
// ledger ("draws": every draw's site and realized seed and offset), which is what recap's
// rng_ledger oracle judges where masks alone would not name a wrong draw.
#pragma once

#include <cstdio>

#include "harness/device/device.h"
#include "harness/sut/protocol.h"
#include "harness/training/executor.h"

namespace recap::sut {

// The observation of one run (the reply to `run`).
Message observation_of(const training::RunResult& r, const Json& id);
// The run an observation of recap's runtime describes, as recap's oracles read it (the inverse
// of observation_of for recap's own fields). ProtocolError when it is not one, or lacks a field or
// frame.
training::RunResult run_result_of(const Message& obs, const training::CaseSpec& spec);
// The reply to `hello`.
Message hello_reply(device::Device& dev);

// Serves requests from `in` until shutdown or end of input. Returns the exit status: 0 shutdown or
// end of input, 2 a protocol mismatch or a stream that cannot be read (after an error reply).
int serve(FILE* in, FILE* out, device::BackendChoice backend);

}  // namespace recap::sut
