// steptrace/core/printable.hpp - text from outside (a program's names, environment values) as a
// warning may show it.
#pragma once
#include "../version.hpp"
#include <cstddef>
#include <string>
#include <string_view>

STEPTRACE_BEGIN_NAMESPACE namespace details {

/// `text` as a message may show it: at most `max` bytes, a byte outside printable ASCII as \xNN (a
/// name from the program may hold anything; a warning must stay one readable line).
inline std::string printable(std::string_view text, std::size_t max = 64) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (char c : text.substr(0, max)) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out += c;
    } else {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  if (text.size() > max) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
