// steptrace/sink/jsonl_file.hpp - appends lines to a file, one write(2) per line with O_APPEND,
// so a line is never torn by another writer and a `tail -f` sees it as soon as it is written.
// A regular file is held with an advisory lock (flock): a second steptrace process that opens the
// same log is told so (held_by_another_writer()) and writes elsewhere; one writer per file is what
// lets a failed write be cut back without cutting anyone else's bytes.
// The log may also be a FIFO, a pipe or a terminal: it is opened non-blocking, so neither start()
// (open) nor the background thread (write) nor stop() waits on a reader that is absent or stuck.
#pragma once
#include "../version.hpp"
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/vfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sink.hpp"

STEPTRACE_BEGIN_NAMESPACE namespace sink {

class JsonlFile final : public LineSink {
 public:
  /// How long a line waits for a stream's reader to make room before it is dropped (counted); once
  /// one has been dropped, later lines do not wait until the reader takes one again.
  static constexpr int kStreamWaitMs = 20;
  /// How long finish_lines() (stop()) waits for the reader to take the rest of a line it took part of.
  static constexpr int kFinishWaitMs = 500;

  JsonlFile() = default;
  JsonlFile(const JsonlFile&) = delete;
  JsonlFile& operator=(const JsonlFile&) = delete;
  ~JsonlFile() override { close(); }

  /// Opens (creating, appending) `path`. Returns "" or the reason it cannot be used.
  std::string open(const std::string& path) {
    close();
    fragment_ended_ = false;
    held_by_other_ = false;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd_ < 0) {
      if (errno == ENXIO)  // O_NONBLOCK on a FIFO without a reader (fifo(7))
        return "cannot open log '" + path + "': it is a FIFO that no process reads (steptrace does not wait for a reader)";
      return "cannot open log '" + path + "': " + std::strerror(errno);
    }
    struct stat st {};
    stream_ = ::fstat(fd_, &st) == 0 && !S_ISREG(st.st_mode);
    if (!stream_) {  // a regular file never blocks a write; keep its status flags plain
      int locked = 0;
      const bool lock = lockable(fd_);
      if (lock) {
        do {
          locked = ::flock(fd_, LOCK_EX | LOCK_NB);
        } while (locked != 0 && errno == EINTR);
      }
      if (locked != 0 && errno == EWOULDBLOCK) {
        abandon();
        held_by_other_ = true;
        return "the log '" + path + "' is being written by another process (it holds the file's lock)";
      }
      locked_ = lock && locked == 0;
      // Another error (a file system without locks): written unlocked, as before.
      const int flags = ::fcntl(fd_, F_GETFL);
      if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
      end_fragment(path, st.st_size);
    }
    path_ = path;
    stalled_ = false;
    rest_.clear();
    return {};
  }

  bool is_open() const { return fd_ >= 0; }
  /// A FIFO, pipe, socket or terminal (/dev/stdout), not a file.
  bool is_stream() const { return fd_ >= 0 && stream_; }
  /// The last open() failed because another process holds the file (its lock).
  bool held_by_another_writer() const { return held_by_other_; }
  std::string describe() const override { return "the log '" + path_ + "'"; }

  /// Writes `line` plus a newline. Returns "" or the error (the caller counts the line as lost).
  std::string write_line(std::string line) override {
    if (fd_ < 0) return "log not open";
    line += '\n';
    return stream_ ? write_stream(std::move(line)) : write_file(line);
  }

  /// After the last line (the background thread, at stop()): a line that a stream's reader took only part of gets up to
  /// kFinishWaitMs to be taken whole. Returns "" or what was abandoned.
  std::string finish_lines() override {
    if (fd_ < 0 || rest_.empty()) return {};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kFinishWaitMs);
    while (!rest_.empty() && std::chrono::steady_clock::now() < deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (!wait_writable(static_cast<int>(left.count()) + 1)) break;
      if (!send_rest()) break;
    }
    if (rest_.empty()) return {};
    const std::string what = "the reader of " + describe() + " stopped taking lines: the last " +
                             std::to_string(rest_.size()) + " bytes of a line it took part of stay unfinished";
    rest_.clear();
    return what;
  }

  /// Ends this run's hold: the lock is released explicitly (a forked child may still hold a copy of
  /// the descriptor, and with it the lock, until it closes it), then the file is closed.
  void close() {
    if (fd_ >= 0 && locked_) ::flock(fd_, LOCK_UN);
    abandon();
  }

  /// In a fork's child: the descriptor is closed without touching the lock, which is the parent's.
  void abandon() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    locked_ = false;
    rest_.clear();
  }

 private:
  /// Whether the file may be locked: not on network file systems, where flock goes to a server (an
  /// unreachable lock manager could stall start(); a lock lost in an outage fails later writes; SMB
  /// makes it mandatory, refusing readers such as tail or the report). There, writers are not told
  /// apart (a warning-free shared log, as before).
  static bool lockable(int fd) {
    struct statfs fs {};
    if (::fstatfs(fd, &fs) != 0) return true;
    const auto type = static_cast<unsigned long>(fs.f_type);
    // Magic numbers of linux/magic.h and the file systems' own headers: NFS, SMB/CIFS, SMB2, Lustre,
    // GPFS, FUSE (sshfs, cloud mounts).
    for (unsigned long network : {0x6969UL, 0x517BUL, 0xFF534D42UL, 0xFE534D42UL, 0x0BD00BD0UL, 0x47504653UL, 0x65735546UL})
      if (type == network) return false;
    return true;
  }

  /// A regular file: a write that fails part way (disk full, file size limit) is undone: the file is
  /// cut back to where the line began, so it stays a sequence of whole lines and the next line does
  /// not glue onto a fragment, but only when the file ends with this line's part (another process
  /// that writes to it without the lock may have appended after it: its bytes are never cut).
  std::string write_file(const std::string& line) {
    const off_t begin = ::lseek(fd_, 0, SEEK_END);  // where O_APPEND puts this line (we hold the lock)
    const char* p = line.data();
    std::size_t left = line.size();
    while (left > 0) {  // one call for a normal line; a loop only for interrupted or short writes
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const std::string err = std::string("write failed: ") + (n < 0 ? std::strerror(errno) : "no progress");
        if (left == line.size() || begin < 0) return err;
        struct stat st {};
        const off_t written = static_cast<off_t>(line.size() - left);
        if (::fstat(fd_, &st) != 0 || st.st_size != begin + written)
          return err + "; the partial line was left in place: the file does not end with it (another writer)";
        if (::ftruncate(fd_, begin) != 0) return err + "; the partial line could not be cut off: " + std::strerror(errno);
        return err;
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    return {};
  }

  /// An earlier writer killed in a write (SIGKILL lands between the pages of a write(2), and the
  /// kernel stops it there) leaves the file ending in a fragment without a newline: end it, so that
  /// this run's first line stays a line of its own.
  void end_fragment(const std::string& path, off_t size) {
    if (size <= 0) return;
    const int rd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (rd < 0) return;
    char last = '\n';
    const bool fragment = ::pread(rd, &last, 1, size - 1) == 1 && last != '\n';
    ::close(rd);
    const char nl = '\n';
    if (fragment && ::write(fd_, &nl, 1) == 1) fragment_ended_ = true;
  }

 public:
  /// open() found the file ending in a fragment of a line (a killed writer's) and ended it.
  bool ended_fragment() const { return fragment_ended_; }

 private:
  /// A FIFO, pipe, socket or terminal: what was written cannot be taken back, so a line the reader
  /// took part of is finished before any other line; a line it takes nothing of is dropped whole.
  std::string write_stream(std::string line) {
    if (!rest_.empty()) {
      if (!stalled_ && wait_writable(kStreamWaitMs)) send_rest();
      if (!rest_.empty()) {
        stalled_ = true;
        return "the reader is not taking lines (a FIFO or pipe that stopped reading); line dropped";
      }
    }
    rest_ = std::move(line);
    const std::size_t size = rest_.size();
    // A full pipe (nothing taken, no error): wait once for room, unless the reader is known to be stuck.
    bool ok = send_rest();
    if (ok && rest_.size() == size && !stalled_ && wait_writable(kStreamWaitMs)) ok = send_rest();
    if (rest_.size() == size) {  // nothing of it taken: dropped whole
      rest_.clear();
      stalled_ = true;
      // An error is said as it is (/dev/full: no space), not as a reader that stopped reading.
      if (!ok) return std::string("cannot write: ") + std::strerror(send_errno_) + "; line dropped";
      return "the reader is not taking lines (a FIFO or pipe that stopped reading); line dropped";
    }
    stalled_ = false;  // taken, or begun (the rest goes first next time)
    return {};
  }

  /// Writes what it can of rest_ without waiting. False on an error other than a full pipe.
  bool send_rest() {
    while (!rest_.empty()) {
      const ssize_t n = ::write(fd_, rest_.data(), rest_.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        send_errno_ = errno;
        return errno == EAGAIN || errno == EWOULDBLOCK;
      }
      if (n == 0) return true;
      rest_.erase(0, static_cast<std::size_t>(n));
    }
    return true;
  }

  bool wait_writable(int ms) {
    pollfd p{fd_, POLLOUT, 0};
    int r;
    do {
      r = ::poll(&p, 1, ms);
    } while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & POLLOUT) != 0;
  }

  int fd_ = -1;
  std::string path_;
  bool stream_ = false;   // not a regular file: writes may block, and cannot be undone
  bool stalled_ = false;  // the last line waited in vain: do not wait again until one is taken
  int send_errno_ = 0;    // the errno of the last failed write (a stream)
  bool fragment_ended_ = false;
  bool held_by_other_ = false;  // open() found the file locked by another process
  bool locked_ = false;         // this object holds the file's lock
  std::string rest_;      // a stream line's part not yet taken by the reader
};

} STEPTRACE_END_NAMESPACE  // steptrace::sink
