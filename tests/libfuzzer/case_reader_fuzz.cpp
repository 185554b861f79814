// libFuzzer target: the case reader, as `recap replay FILE` reads a file's bytes (the strict JSON
// parse of harness/base/json_read.h, then case_from_json). Total: any input is a case or one line
// of error; a case read must write back to JSON that reads as the same case.
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/base/json_read.h"
#include "harness/training/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  recap::Json j;
  std::string err = recap::parse_json_strict(text, &j);
  if (err.empty()) {
    recap::training::CaseSpec s;
    err = recap::training::case_from_json(j, &s);
    if (err.empty()) {
      recap::training::CaseSpec again;
      const recap::Json out = recap::training::case_to_json(s);
      if (!recap::training::case_from_json(out, &again).empty() || recap::training::case_to_json(again) != out)
        __builtin_trap();  // a case that does not survive its own round trip
    }
  }
  if (err.find('\n') != std::string::npos) __builtin_trap();  // the one-line contract
  return 0;
}
