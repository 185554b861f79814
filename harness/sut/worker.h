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
#include <stdexcept>
#include <vector>

#include "harness/device/device.h"
#include "harness/sut/protocol.h"
#include "harness/sut/sut.h"
#include "harness/training/executor.h"

namespace recap::sut {

// The observation of one run (the reply to `run`).
Message observation_of(const training::RunResult& r, const Json& id);
// The run an observation describes, as recap's oracles read it. From recap's runtime (the "recap"
// extension) it is the inverse of observation_of; from another system the RNG ledger is built
// from the reported masks (a draw per mask, its digest for the realized values) and judged by
// CONTRACT.md's rule, graphs from its "graphs" captures and steps' "replays" (observed.h), and the
// memory from the common figures. SkippedBySut for status "skipped"; ProtocolError when it is not an
// observation, or lacks a field or frame.
training::RunResult run_result_of(const Message& obs, const training::CaseSpec& spec);

// The frames a run request carries (drivers/PROTOCOL.md, "run"): every parameter's initial values
// (`param <name>`) and every step's inputs and targets (`input|target <step> <microbatch>`), made
// by recap's own rule from the case's seeds, so every system runs the same program.
std::vector<Frame> case_frames(const training::CaseSpec& spec);

// The reply to `hello`.
Message hello_reply(device::Device& dev);
// The hello's "visible_device": CUDA_VISIBLE_DEVICES as this process sees it (null when unset) and
// the device's uuid and PCI bus id (null on sim): which GPU a --gpus job ran on.
Json visible_device_json(const device::Device& dev);

// Serves requests from `in` until shutdown or end of input. Returns the exit status: 0 shutdown or
// end of input, 2 a protocol mismatch or a stream that cannot be read (after an error reply).
int serve(FILE* in, FILE* out, device::BackendChoice backend);

}  // namespace recap::sut
