// The one JSON type recap writes and reads (insertion-ordered, so files keep the order they are
// written in), and the one rule for numbers JSON cannot hold: non-finite values are the strings
// "nan", "inf", "-inf" (nlohmann would write null), as the report and run schemas say.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace recap {

using Json = nlohmann::ordered_json;

// A double as JSON: itself, or "nan", "inf", "-inf".
inline Json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

// Any nlohmann JSON (plain, with sorted keys, or ordered) as Json in the same key order, every
// non-finite floating-point number replaced as json_number does.
template <class J>
Json explicit_nonfinite(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::object: {
      Json o = Json::object();
      for (auto it = j.begin(); it != j.end(); ++it) o[it.key()] = explicit_nonfinite(it.value());
      return o;
    }
    case nlohmann::json::value_t::array: {
      Json a = Json::array();
      for (const auto& v : j) a.push_back(explicit_nonfinite(v));
      return a;
    }
    case nlohmann::json::value_t::number_float: return json_number(j.template get<double>());
    case nlohmann::json::value_t::number_integer: return j.template get<int64_t>();
    case nlohmann::json::value_t::number_unsigned: return j.template get<uint64_t>();
    case nlohmann::json::value_t::boolean: return j.template get<bool>();
    case nlohmann::json::value_t::string: return j.template get<std::string>();
    default: return nullptr;
  }
}

// j with the keys of every object in sorted order, at every level. Case reports are written so:
// their figures come from several oracles, and sorted keys keep the bytes independent of which
// oracle ran first or which were selected.
inline Json sorted_keys(const Json& j) {
  if (j.is_object()) {
    std::map<std::string, const Json*> by_key;
    for (auto it = j.begin(); it != j.end(); ++it) by_key[it.key()] = &it.value();
    Json o = Json::object();
    for (const auto& [k, v] : by_key) o[k] = sorted_keys(*v);
    return o;
  }
  if (j.is_array()) {
    Json a = Json::array();
    for (const auto& v : j) a.push_back(sorted_keys(v));
    return a;
  }
  return j;
}

}  // namespace recap
