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

  /// Writes `line` plus a newline. Returns "" or the error. A write that fails part way (disk full,
  /// file size limit) is undone: the file is cut back to where the line began, so it stays a sequence
  /// of whole lines and the next line does not glue onto a fragment (the caller counts the lost line).
  std::string write_line(std::string line) override {
    if (fd_ < 0) return "log not open";
    line += '\n';
    const off_t begin = ::lseek(fd_, 0, SEEK_END);  // where O_APPEND puts this line (one writer per file)
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {  // one call for a normal line; a loop only for interrupted or short writes
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const std::string err = std::string("write failed: ") + (n < 0 ? std::strerror(errno) : "no progress");
        if (left < line.size() && begin >= 0 && ::ftruncate(fd_, begin) != 0)
          return err + "; the partial line could not be cut off: " + std::strerror(errno);
        return err;
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
