// steptrace/sink/prometheus_textfile.hpp - replaces a file's content atomically: the text goes to a
// temporary file in the same directory, which is then renamed over the target, so a reader (the
// node_exporter textfile collector, a trace viewer) sees the old file or the new one, never a part.
// The temporary name does not end in `.prom` or `.json`, so neither reads it.
//
// Only a regular file (or nothing) is replaced: a device node, FIFO, socket, directory or symbolic
// link at the target is refused (a rename would put a regular file in its place: /dev/null, as root).
// The temporary is created with O_EXCL | O_NOFOLLOW, so a name planted beforehand (a symbolic link to
// a file elsewhere) is never written through: another name is tried, a few times, then the write is
// refused. Between the check of the target and the rename another process could still swap it; the
// rename then replaces what stands at the name, never writes into what it points to.
#pragma once
#include "../version.hpp"
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

STEPTRACE_BEGIN_NAMESPACE namespace sink {

/// The temporary names replace_file_atomically tries for `path`, attempt 0, 1, ...
inline std::string temporary_name(const std::string& path, unsigned attempt) {
  return path + ".tmp." + std::to_string(::getpid()) + (attempt ? "." + std::to_string(attempt) : std::string());
}
inline constexpr unsigned kTemporaryAttempts = 8;

/// "" when `path` may be replaced (a regular file or nothing stands there), else why not.
inline std::string replaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? std::string() : "cannot inspect '" + path + "': " + std::strerror(errno);
  if (S_ISREG(st.st_mode)) return {};
  const char* what = S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device node" : "not a regular file";
  return "'" + path + "' is " + what + ": steptrace replaces only a regular file (or creates one), so it is left as it is";
}

/// Writes `text` to `path` atomically. Returns "" or the error (the target is then left as it was).
inline std::string replace_file_atomically(const std::string& path, const std::string& text) {
  if (std::string why = replaceable(path); !why.empty()) return why;
  std::string tmp;
  int fd = -1;
  for (unsigned attempt = 0; attempt < kTemporaryAttempts && fd < 0; ++attempt) {
    tmp = temporary_name(path, attempt);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) return "cannot create '" + tmp + "': " + std::strerror(errno);
  }
  if (fd < 0)
    return "cannot create a temporary file next to '" + path + "': " + std::to_string(kTemporaryAttempts) +
           " names are taken (" + temporary_name(path, 0) + "...): nothing is written through a name found in place";
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
  if (err.empty()) err = replaceable(path);  // checked again just before the rename
  if (err.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
    err = "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno);
  if (!err.empty()) ::unlink(tmp.c_str());  // ours: created with O_EXCL
  return err;
}

} STEPTRACE_END_NAMESPACE  // steptrace::sink
