// steptrace/sink/jsonl_file.hpp - appends lines to a file, one write(2) per line with O_APPEND,
// so a line is never torn by another writer and a `tail -f` sees it as soon as it is written.
#pragma once
#include "../version.hpp"
#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include "sink.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace sink {

class JsonlFile final : public LineSink {
 public:
  JsonlFile() = default;
  JsonlFile(const JsonlFile&) = delete;
  JsonlFile& operator=(const JsonlFile&) = delete;
  ~JsonlFile() override { close(); }

  /// Opens (creating, appending) `path`. Returns "" or the reason it cannot be used.
  std::string open(const std::string& path) {
    close();
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) return "cannot open log '" + path + "': " + std::strerror(errno);
    path_ = path;
    return {};
  }

  bool is_open() const { return fd_ >= 0; }
  std::string describe() const override { return "the log '" + path_ + "'"; }

  /// Writes `line` plus a newline. Returns "" or the error.
  std::string write_line(std::string line) override {
    if (fd_ < 0) return "log not open";
    line += '\n';
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {  // one call for a normal line; a loop only for interrupted or short writes
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return std::string("write failed: ") + std::strerror(errno);
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    return {};
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string path_;
};

} STEPTRACE_END_NAMESPACE  // steptrace::sink
