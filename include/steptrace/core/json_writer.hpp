// steptrace/core/json_writer.hpp - a minimal streaming JSON writer for one line. Non-finite
// numbers are written as null (JSON has no NaN), strings are escaped per RFC 8259. On request it also
// records every leaf it writes under its JSON pointer (core/json_flat.hpp's FlatJson, what reading
// the text back would give, but for `integral`: set here by the integer overloads only, where a whole
// double reads back as an integer): the line's fields for a sink, without parsing the text.
#pragma once
#include "../version.hpp"
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "json_flat.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace details {

class JsonWriter {
 public:
  /// From now on, every leaf written also goes into `leaves` (null: stop recording).
  void record_leaves(FlatJson* leaves) { leaves_ = leaves; }

  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  JsonWriter& key(std::string_view k) {
    comma();
    if (leaves_) key_ = valid_utf8(k);
    string_literal(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& null() {
    leaf(JsonLeaf{});
    return raw("null");
  }
  JsonWriter& value(bool b) {
    leaf(JsonLeaf{JsonLeaf::Kind::boolean, b ? 1.0 : 0.0, {}});
    return raw(b ? "true" : "false");
  }
  JsonWriter& value(std::string_view s) {
    comma();
    if (leaves_) leaf(JsonLeaf{JsonLeaf::Kind::string, 0, valid_utf8(s)});
    string_literal(s);
    return *this;
  }
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(int64_t v) {
    leaf(JsonLeaf{JsonLeaf::Kind::number, static_cast<double>(v), {}, true});
    return raw(std::to_string(v));
  }
  JsonWriter& value(uint64_t v) {
    leaf(JsonLeaf{JsonLeaf::Kind::number, static_cast<double>(v), {}, true});
    return raw(std::to_string(v));
  }
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(unsigned v) { return value(static_cast<uint64_t>(v)); }
  JsonWriter& value(double v) {
    if (!std::isfinite(v)) return null();
    char buf[32];  // shortest text that reads back as the same double
    const auto result = std::to_chars(buf, buf + sizeof buf, v);
    leaf(JsonLeaf{JsonLeaf::Kind::number, v, {}});
    return raw(std::string_view(buf, static_cast<std::size_t>(result.ptr - buf)));
  }
  template <class T>
  JsonWriter& value(const std::optional<T>& v) {
    return v ? value(*v) : null();
  }
  template <class T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  const std::string& str() const { return out_; }
  std::string release() { return std::move(out_); }  // the text, without a copy; the writer is spent
  /// A string as the text carries it once read back: bytes that start no well-formed UTF-8 sequence
  /// become U+FFFD (string_literal's rule).
  static std::string valid_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (static_cast<unsigned char>(s[i]) < 0x80) out += s[i];
      else i += append_non_ascii(s, i, out) - 1;
    }
    return out;
  }

 private:
  JsonWriter& open(char c) {
    comma();
    if (leaves_) {
      const std::size_t parent = path_.size();
      element_pointer(path_);
      levels_.push_back({parent, c == '[', 0});
    }
    out_ += c;
    first_ = true;
    return *this;
  }
  JsonWriter& close(char c) {
    if (leaves_ && !levels_.empty()) {
      path_.resize(levels_.back().parent);
      levels_.pop_back();
    }
    out_ += c;
    first_ = false;
    return *this;
  }

  // ---- leaf recording (record_leaves) ----
  struct Level {
    std::size_t parent;  // path_'s length outside this container
    bool array;
    std::size_t next_index;
  };
  /// Appends the pointer of the element being written now (the last key's, or the array's next index).
  void element_pointer(std::string& path) {
    if (levels_.empty()) return;  // the top-level value: ""
    path += '/';
    if (levels_.back().array) {
      path += std::to_string(levels_.back().next_index++);
      return;
    }
    for (char c : key_) {  // RFC 6901, as json_flat.hpp names leaves
      if (c == '~') path += "~0";
      else if (c == '/') path += "~1";
      else path += c;
    }
  }
  void leaf(JsonLeaf l) {
    if (!leaves_) return;
    std::string pointer = path_;
    element_pointer(pointer);
    (*leaves_)[std::move(pointer)] = std::move(l);
  }
  JsonWriter& raw(std::string_view s) {
    comma();
    out_ += s;
    return *this;
  }
  void comma() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_ && !out_.empty()) out_ += ',';
    first_ = false;
  }
  /// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629, table 3-7 of the Unicode standard:
  /// no overlongs, no surrogates, nothing above U+10FFFF), or 0 if it is not one.
  static std::size_t utf8_sequence(std::string_view s, std::size_t i) {
    const auto b = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
    const unsigned c = b(0);
    const auto cont = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) { return b(k) >= lo && b(k) <= hi; };
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
    if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
    if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
    if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
    if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
    if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
    return 0;
  }

  /// The non-ASCII byte at s[i] and what follows it: its well-formed UTF-8 sequence as it is, else
  /// U+FFFD for that byte. Returns the bytes of `s` consumed.
  static std::size_t append_non_ascii(std::string_view s, std::size_t i, std::string& out) {
    if (const std::size_t n = utf8_sequence(s, i)) {
      out.append(s.data() + i, n);
      return n;
    }
    out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    return 1;
  }

  // Names (kernels, host, device, phases, scalars) come from outside: a byte that does not start a
  // well-formed UTF-8 sequence is written as U+FFFD, so every line is valid JSON text.
  void string_literal(std::string_view s) {
    out_ += '"';
    for (std::size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      const auto u = static_cast<unsigned char>(c);
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (u < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", u);
            out_ += buf;
          } else if (u < 0x80) {
            out_ += c;
          } else {
            i += append_non_ascii(s, i, out_) - 1;
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  bool first_ = true;
  bool after_key_ = false;
  FlatJson* leaves_ = nullptr;  // record_leaves()
  std::vector<Level> levels_;
  std::string path_;  // the pointer of the innermost open container
  std::string key_;   // the last key written (as read back)
};

} STEPTRACE_END_NAMESPACE  // steptrace::details
