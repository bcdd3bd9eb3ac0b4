// steptrace/sink/sink.hpp - where finished lines go. The background thread hands each written line
// to every sink of the run; a sink never blocks the training thread (it is only called from the
// background thread) and reports a failure as text, which the runtime counts and warns about once.
#pragma once
#include "../version.hpp"
#include <string>
#include <utility>

#include "../core/json_flat.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace sink {

class LineSink {
 public:
  virtual ~LineSink() = default;
  /// What the sink is, for messages ("the log 'steps.jsonl'").
  virtual std::string describe() const = 0;
  /// One line, without its newline. Returns "" or the error.
  virtual std::string write_line(std::string line) = 0;
  /// Whether the sink reads a step line's fields (write_step_line gets them), not only its text.
  virtual bool reads_fields() const { return false; }
  /// A step line with its fields by JSON pointer (made as the text was written, the same values; null
  /// unless reads_fields()). Event records (stall, end) come through write_line alone.
  virtual std::string write_step_line(std::string line, const FlatJson* fields) {
    (void)fields;
    return write_line(std::move(line));
  }
  /// Whether its writes are the run's "lines written" (the log), or a view of them (an exporter).
  virtual bool counts_lines() const { return true; }
  /// After the last line, on the background thread: finish what is in flight, within a bounded time.
  /// Returns "" or what was abandoned.
  virtual std::string finish_lines() { return {}; }
};

} STEPTRACE_END_NAMESPACE  // steptrace::sink
