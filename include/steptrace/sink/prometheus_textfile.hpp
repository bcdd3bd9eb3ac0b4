// steptrace/sink/prometheus_textfile.hpp - replaces a file's content atomically: the text goes to a
// temporary file in the same directory, which is then renamed over the target, so a reader (the
// node_exporter textfile collector, a trace viewer) sees the old file or the new one, never a part.
// The temporary name does not end in `.prom` or `.json`, so neither reads it.
#pragma once
#include "../version.hpp"
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <unistd.h>

STEPTRACE_BEGIN_NAMESPACE namespace sink {

/// Writes `text` to `path` atomically. Returns "" or the error (the target is then left as it was).
inline std::string replace_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create '" + tmp + "': " + std::strerror(errno);
  const char* p = text.data();
  std::size_t left = text.size();
  std::string err;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = "cannot write '" + tmp + "': " + (n < 0 ? std::strerror(errno) : "no progress");
      break;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 && err.empty()) err = "cannot write '" + tmp + "': " + std::strerror(errno);
  if (err.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
    err = "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno);
  if (!err.empty()) ::unlink(tmp.c_str());
  return err;
}

} STEPTRACE_END_NAMESPACE  // steptrace::sink
