// steptrace/core/measured.hpp - a value a line may lack, and why it does, as one thing (Measured<T>).
#pragma once
#include "../version.hpp"
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

STEPTRACE_BEGIN_NAMESPACE

namespace details {
/// Values left unknown without a reason (a producer's bug; the line says so in the reason's place).
/// Tests hold it at 0.
inline std::atomic<uint64_t>& measured_without_reason() {
  static std::atomic<uint64_t> n{0};
  return n;
}
inline constexpr const char* kNoReasonGiven = "unknown, and its producer gave no reason (a steptrace bug: please report it)";
}  // namespace details

/// A value of the line, or why it is null: a producer cannot give a null without its reason, nor leave
/// a reason beside a value that came later. Made unknown with its first reason (there is no default);
/// assigning a value makes it known; unknown(why) forgets the value. Reads like std::optional (bool,
/// *, ->, has_value) and converts to one, so code that only reads the value is unchanged; LineOut's
/// field(name, measured) writes the value or null with the reason.
template <class T>
class Measured {
 public:
  explicit Measured(std::string why) { unknown(std::move(why)); }
  Measured(std::optional<T> v, std::string why_not) { set(std::move(v), std::move(why_not)); }

  /// Known: the value (its reason goes).
  Measured& operator=(T v) {
    v_ = std::move(v);
    why_.clear();
    return *this;
  }
  /// The value when there is one, else unknown with `why_not`.
  Measured& set(std::optional<T> v, std::string why_not) {
    if (v) return *this = std::move(*v);
    return unknown(std::move(why_not));
  }
  /// Unknown, and why. An empty reason is a producer's bug: counted, and said as such.
  Measured& unknown(std::string why) {
    v_.reset();
    if (why.empty()) {
      details::measured_without_reason().fetch_add(1, std::memory_order_relaxed);
      why = details::kNoReasonGiven;
    }
    why_ = std::move(why);
    return *this;
  }

  bool has_value() const { return v_.has_value(); }
  explicit operator bool() const { return v_.has_value(); }
  const T& operator*() const { return *v_; }
  T& operator*() { return *v_; }
  const T* operator->() const { return &*v_; }
  T* operator->() { return &*v_; }
  template <class U>
  T value_or(U&& fallback) const { return v_.value_or(std::forward<U>(fallback)); }
  const std::optional<T>& optional() const { return v_; }
  operator const std::optional<T>&() const { return v_; }  // NOLINT: reads as the optional it holds
  /// Why it is unknown ("" when known).
  const std::string& why() const { return why_; }

 private:
  std::optional<T> v_;
  std::string why_;
};

STEPTRACE_END_NAMESPACE  // steptrace
