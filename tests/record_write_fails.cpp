// record_write_fails LOG - a log whose device refuses the compact run record (ENOSPC, as a full disk that
// frees a little room between two writes would) while the step lines would still fit: no compact line
// may then be written without its record (it would have no host, pid or settings). Then the device
// takes every write again: the record comes first, the lines after it.
//
// The refusal is made here, in this program's own write(2) (the library is compiled into it, so its
// writes bind to this definition): a record's write fails while `refuse_records` is set; everything
// else goes to the kernel.
#include <steptrace/steptrace.hpp>
#include <steptrace/details/session.hpp>

#include "child_steps.hpp"
#include "host_config.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <sys/syscall.h>
#include <unistd.h>

namespace {
std::atomic<bool> refuse_records{false};
std::atomic<int> refused{0};
}  // namespace

extern "C" ssize_t write(int fd, const void* buf, size_t n) {
  static const char kRecord[] = "{\"event\":\"run\"";
  if (refuse_records.load() && n >= sizeof(kRecord) - 1 && std::memcmp(buf, kRecord, sizeof(kRecord) - 1) == 0) {
    refused.fetch_add(1);
    errno = ENOSPC;
    return -1;
  }
  return ::syscall(SYS_write, fd, buf, n);
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  // The compact line (the default) and its run record: CTest's STEPTRACE_LINE_DETAIL=full, which the
  // environment would set over the program's setting, is lifted here.
  ::unsetenv("STEPTRACE_LINE_DETAIL");
  steptrace::Config cfg = steptrace_test::host_config(argv[1]);
  cfg.line_detail = steptrace::LineDetail::compact;
  refuse_records = true;
  steptrace::start(cfg);
  steptrace_test::forward_steps(5);
  // Wait for the event: the background thread has met the refusal (a line counted unwritten).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline && steptrace::details::Session::current().lines_failed_so_far() == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  refuse_records = false;
  steptrace_test::forward_steps(5);
  const auto s = steptrace::stop();
  return s.lines_failed > 0 && refused.load() > 0 ? 0 : 3;  // the test needs the refusal to have been met
}
