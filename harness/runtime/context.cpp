// Ctx and DeviceError (context.h).
#include "harness/runtime/context.h"

#include "harness/runtime/rng_state_kernels.h"

namespace recap::runtime {

namespace {
std::string device_error_message(const std::string& api, device::Status status, const std::string& where) {
  std::string m = api + " failed: " + device::error_name(status);
  if (!where.empty()) m += " (" + where + ")";
  return m;
}
}  // namespace

DeviceError::DeviceError(const std::string& api_, device::Status status_, const std::string& where)
    : std::runtime_error(device_error_message(api_, status_, where)), api(api_), status(status_) {}

Draw Ctx::draw(const std::string& op, uint64_t count) {
  Draw d;
  std::string generator;
  if (draw_override) {
    d.args = PhiloxArgs::from_device(draw_override->seed_dev, draw_override->offset_dev, draw_override->next);
    draw_override->next += draw_increment(count);
    generator = "override";
  } else {
    d.args = rng.current().draw(count);
    generator = rng.current_name();
  }
  if (ledger != nullptr) d.record = ledger->slot(DrawSite{layer, op, phase, microbatch}, count, generator);
  return d;
}

void Ctx::record_draw(const Draw& d) {
  if (d.record == nullptr) return;
  launch(record_draw_kernel(d.record, d.args));
}

void Ctx::launch(const device::Kernel& k) {
  device::Status s = dev.launch(k, stream);
  if (!device::ok(s)) throw DeviceError("kernel " + k.name, s, layer);
}

Tensor Ctx::alloc_tensor(const Shape& shape, DType dtype, device::MemCategory cat) { return alloc.alloc(shape, dtype, cat); }

LayerScope::LayerScope(Ctx& ctx, const std::string& name) : ctx_(ctx), previous_(ctx.layer) {
  ctx_.layer = previous_.empty() ? name : previous_ + "." + name;
}

LayerScope::~LayerScope() { ctx_.layer = previous_; }

}  // namespace recap::runtime
