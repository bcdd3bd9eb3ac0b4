// steptrace/sink/sink.hpp - where finished lines go. The background thread hands each written line
// to every sink of the run; a sink never blocks the training thread (it is only called from the
// background thread) and reports a failure as text, which the runtime counts and warns about once.
#pragma once
#include "../version.hpp"
#include <string>

STEPTRACE_BEGIN_NAMESPACE namespace sink {

class LineSink {
 public:
  virtual ~LineSink() = default;
  /// What the sink is, for messages ("the log 'steps.jsonl'").
  virtual std::string describe() const = 0;
  /// One line, without its newline. Returns "" or the error.
  virtual std::string write_line(std::string line) = 0;
  /// Whether its writes are the run's "lines written" (the log), or a view of them (an exporter).
  virtual bool counts_lines() const { return true; }
  /// After the last line, on the background thread: finish what is in flight, within a bounded time.
  /// Returns "" or what was abandoned.
  virtual std::string finish_lines() { return {}; }
};

} STEPTRACE_END_NAMESPACE  // steptrace::sink
