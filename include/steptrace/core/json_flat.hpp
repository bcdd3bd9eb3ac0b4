// steptrace/core/json_flat.hpp - reads one JSON text into its leaves, each named by its JSON pointer
// (RFC 6901: "/phases/forward/host_ms", "/warnings/0"). Enough to read a request file
// (core/capture_request.hpp) or a line given as text, without a JSON library in the runtime. The step
// lines' own fields come from the writer (core/json_writer.hpp records the same leaves as it writes).
// Numbers are read with std::from_chars (the program's locale cannot change them); strings are
// unescaped (\uXXXX to UTF-8, surrogate pairs joined). Nesting deeper than kMaxDepth is refused.
// A reader of text it does not trust bounds what is kept (JsonFlattenLimits): keys longer than a bound
// refused, only the leaves it asks for stored, at most so many. Without them one 128 KiB file (a
// 64 000-byte key over an array of 33 532 zeros) made ~2 GB of pointers: every leaf stored under its
// full path, cost growing with the square of the size.
#pragma once
#include "../version.hpp"
#include <cctype>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

STEPTRACE_BEGIN_NAMESPACE

struct JsonLeaf {
  enum class Kind : uint8_t { null, boolean, number, string } kind = Kind::null;
  double number = 0;  // number; boolean as 0/1
  std::string text;   // string
  bool integral = false;  // a number written as an integer: from an integer type (JsonWriter), or read
                          // without a fraction or an exponent
};

/// Leaves by JSON pointer. Empty objects and arrays leave nothing.
using FlatJson = std::unordered_map<std::string, JsonLeaf>;

/// What a reader keeps of a text it does not trust. The defaults keep everything.
struct JsonFlattenLimits {
  std::size_t max_key_bytes = static_cast<std::size_t>(-1);  // a longer object key refuses the text
  std::size_t max_leaves = static_cast<std::size_t>(-1);     // more leaves kept than this refuses it
  bool (*keep)(std::string_view pointer) = nullptr;          // the leaves stored (null: all); others are checked and dropped
};

namespace details {

class JsonFlattener {
 public:
  static constexpr int kMaxDepth = 32;
  JsonFlattener(std::string_view text, FlatJson& out, JsonFlattenLimits limits = {})
      : s_(text), out_(out), limits_(limits) {}

  /// "" or what is wrong (and where).
  std::string run() {
    std::string path;
    if (!value(path, 0)) return error_.empty() ? fail("bad JSON") : error_;
    skip_space();
    if (i_ != s_.size()) return fail("text after the JSON value");
    return {};
  }
  /// The text was refused by a limit (JsonFlattenLimits), not for its syntax.
  bool limited() const { return limited_; }

 private:
  std::string fail(const char* what) {
    error_ = std::string(what) + " at offset " + std::to_string(i_);
    return error_;
  }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return fail("bad literal"), false;
    i_ += word.size();
    return true;
  }
  static void escape_pointer(std::string_view key, std::string& path) {
    for (char c : key) {
      if (c == '~') path += "~0";
      else if (c == '/') path += "~1";
      else path += c;
    }
  }

  bool value(std::string& path, int depth) {
    if (depth > kMaxDepth) return fail("nested too deeply"), false;
    skip_space();
    if (i_ >= s_.size()) return fail("unexpected end"), false;
    const char c = s_[i_];
    JsonLeaf leaf;
    if (c == '{') return object(path, depth);
    if (c == '[') return array(path, depth);
    if (c == '"') {
      leaf.kind = JsonLeaf::Kind::string;
      if (!string(leaf.text)) return false;
    } else if (c == 't' || c == 'f') {
      leaf.kind = JsonLeaf::Kind::boolean;
      leaf.number = c == 't';
      if (!literal(c == 't' ? "true" : "false")) return false;
    } else if (c == 'n') {
      if (!literal("null")) return false;
    } else {
      leaf.kind = JsonLeaf::Kind::number;
      std::size_t end = i_;
      while (end < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[end])) || s_[end] == '-' ||
                                 s_[end] == '+' || s_[end] == '.' || s_[end] == 'e' || s_[end] == 'E'))
        ++end;
      const auto r = std::from_chars(s_.data() + i_, s_.data() + end, leaf.number);
      if (r.ec != std::errc() || r.ptr != s_.data() + end || end == i_) return fail("bad number"), false;
      leaf.integral = std::string_view(s_.data() + i_, end - i_).find_first_of(".eE") == std::string_view::npos;
      i_ = end;
    }
    if (limits_.keep && !limits_.keep(path)) return true;  // read and checked, not kept
    if (out_.size() >= limits_.max_leaves && !out_.count(path))
      return limited_ = true, fail("more values than the reader keeps"), false;
    out_[path] = std::move(leaf);
    return true;
  }

  bool object(std::string& path, int depth) {
    ++i_;  // '{'
    skip_space();
    if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
    for (;;) {
      skip_space();
      std::string key;
      if (i_ >= s_.size() || s_[i_] != '"' || !string(key)) return fail("expected a key"), false;
      if (key.size() > limits_.max_key_bytes)
        return limited_ = true, fail(("a key of " + std::to_string(key.size()) + " bytes (at most " +
                                      std::to_string(limits_.max_key_bytes) + ")").c_str()), false;
      skip_space();
      if (i_ >= s_.size() || s_[i_] != ':') return fail("expected ':'"), false;
      ++i_;
      const std::size_t keep = path.size();
      path += '/';
      escape_pointer(key, path);
      if (!value(path, depth + 1)) return false;
      path.resize(keep);
      skip_space();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
      return fail("expected ',' or '}'"), false;
    }
  }

  bool array(std::string& path, int depth) {
    ++i_;  // '['
    skip_space();
    if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
    for (std::size_t n = 0;; ++n) {
      const std::size_t keep = path.size();
      path += '/' + std::to_string(n);
      if (!value(path, depth + 1)) return false;
      path.resize(keep);
      skip_space();
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        continue;
      }
      if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
      return fail("expected ',' or ']'"), false;
    }
  }

  static void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool hex4(uint32_t& v) {
    if (i_ + 4 > s_.size()) return false;
    const auto r = std::from_chars(s_.data() + i_, s_.data() + i_ + 4, v, 16);
    if (r.ec != std::errc() || r.ptr != s_.data() + i_ + 4) return false;
    i_ += 4;
    return true;
  }

  bool string(std::string& out) {
    ++i_;  // '"'
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in a string"), false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) break;
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return fail("bad \\u escape"), false;
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(i_, 2) == "\\u") {
            i_ += 2;
            uint32_t low = 0;
            if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return fail("bad surrogate pair"), false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xD800 && cp < 0xE000) {
            cp = 0xFFFD;  // a lone surrogate: the replacement character
          }
          append_utf8(cp, out);
          break;
        }
        default: return fail("bad escape"), false;
      }
    }
    return fail("unterminated string"), false;
  }

  std::string_view s_;
  FlatJson& out_;
  JsonFlattenLimits limits_;
  bool limited_ = false;
  std::size_t i_ = 0;
  std::string error_;
};

}  // namespace details

/// Reads `text` into `out` (cleared first). Returns "" or what is wrong.
inline std::string flatten_json(std::string_view text, FlatJson& out) {
  out.clear();
  return details::JsonFlattener(text, out).run();
}

STEPTRACE_END_NAMESPACE  // steptrace
