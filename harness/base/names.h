// The one way recap names an enum's values (as CUTLASS's enum tables do): a table of
// {value, name} pairs, written once beside the enum's *_name / *_from_name functions, which are
// one-line calls of name_of and from_name. The names are the ones case files, reports and flags use.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace recap {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

template <typename E, size_t N>
std::string name_of(const EnumName<E> (&table)[N], E v) {
  for (const auto& e : table)
    if (e.value == v) return e.name;
  return "unknown";
}

template <typename E, size_t N>
bool from_name(const EnumName<E> (&table)[N], std::string_view s, E* out) {
  for (const auto& e : table)
    if (s == e.name) {
      *out = e.value;
      return true;
    }
  return false;
}

// "a, b, c": the names, for error messages and --help.
template <typename E, size_t N>
std::string names_list(const EnumName<E> (&table)[N]) {
  std::string s;
  for (const auto& e : table) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

template <typename E, size_t N>
std::vector<std::string> names(const EnumName<E> (&table)[N]) {
  std::vector<std::string> v;
  for (const auto& e : table) v.emplace_back(e.name);
  return v;
}

}  // namespace recap
