// Names of the device layer's enums, and backend choice.
#include <string>

#include "harness/device/device.h"
#include "harness/device/memory.h"

namespace recap::device {

}  // namespace recap::device
