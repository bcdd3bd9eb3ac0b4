// A log that blocks (issue #17): a FIFO with no reader, or whose reader stops reading. Nothing on the
// training thread may wait for it, stop() ends in bounded time and says what it gave up, and what the
// reader does get is whole lines. An alarm turns a hang into a failure instead of a stuck CI job.
#include <steptrace/steptrace.hpp>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <iterator>
#include <vector>
#include <cstdlib>
#include <string>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capture_log.hpp"
#include "host_config.hpp"
#include "support.hpp"

namespace {

using Clock = std::chrono::steady_clock;

bool logged(const std::string& text) { return steptrace_test::captured_log().str().find(text) != std::string::npos; }

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string fresh_fifo(const std::string& name) {
  const std::string path = name + ".fifo";
  ::unlink(path.c_str());
  REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
  return path;
}

void steps(int n) {
  for (int i = 0; i < n; ++i) {
    TRACE_STEP(1000.0);
    {
      TRACE_PHASE(forward);
      steptrace_test::spin_for_us(200);
    }
    steptrace::record("loss", 1.0 / (i + 1));
  }
}

/// What the reader got: every newline-terminated line must parse; an unterminated tail is returned.
std::size_t parse_whole_lines(const std::string& content, std::string& tail) {
  std::size_t n = 0, begin = 0;
  for (std::size_t nl = content.find('\n'); nl != std::string::npos; nl = content.find('\n', begin)) {
    const std::string text = content.substr(begin, nl - begin);
    INFO("line: " << text.substr(0, 300));
    REQUIRE_NOTHROW(nlohmann::json::parse(text));
    ++n;
    begin = nl + 1;
  }
  tail = content.substr(begin);
  return n;
}

std::string drain(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace

TEST_CASE("a FIFO with no reader: start() does not wait for one, training goes on, a warning says why", "[sinks]") {
  ::alarm(60);
  const std::string fifo = fresh_fifo("no_reader");
  const auto t0 = Clock::now();
  REQUIRE(steptrace::start(steptrace_test::host_config(fifo)));
  CHECK(seconds_since(t0) < 2.0);
  steps(20);
  const auto t1 = Clock::now();
  const auto s = steptrace::stop();
  CHECK(seconds_since(t1) < 2.0);
  CHECK(s.lines_written == 0);
  CHECK(logged("configuration error in log_path"));
  CHECK(logged("no_reader.fifo': it is a FIFO that no process reads"));
  ::alarm(0);
}

// /dev/full takes no line (ENOSPC): the warning says the error, not a FIFO reader that stopped (issue #58).
TEST_CASE("log_path=/dev/full: the lines are counted unwritten and the warning names the error", "[sinks]") {
  if (::access("/dev/full", W_OK) != 0) {
    WARN("no writable /dev/full here");
    return;
  }
  REQUIRE(steptrace::start(steptrace_test::host_config("/dev/full")));
  steps(5);
  const auto s = steptrace::stop();
  CHECK(s.lines_written == 0);
  CHECK(logged("cannot write to the log '/dev/full': cannot write: No space left on device"));
}

TEST_CASE("a FIFO whose reader stops reading: stop() ends in bounded time and counts what it gave up", "[sinks]") {
  ::alarm(60);
  const std::string fifo = fresh_fifo("stuck_reader");
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // open, never read until the end
  REQUIRE(reader >= 0);
  REQUIRE(steptrace::start(steptrace_test::host_config(fifo)));
  const auto t0 = Clock::now();
  steps(400);  // far more than a pipe holds (64 KiB on Linux)
  CHECK(seconds_since(t0) < 30.0);
  const auto t1 = Clock::now();
  const auto s = steptrace::stop();
  const double stop_s = seconds_since(t1);
  CHECK(stop_s < 3.0);
  CHECK(s.lines_failed > 0);
  CHECK(s.lines_written > 0);
  // every step written, failed, or (a writer slowed by a loaded machine or a sanitizer) dropped at the
  // bounded queue: each counted
  CHECK(s.lines_written + s.lines_failed + s.steps_dropped == 400);
  CHECK(logged("cannot write to the log 'stuck_reader.fifo': the reader is not taking lines"));
  std::string tail;
  const std::size_t whole = parse_whole_lines(drain(reader), tail);
  ::close(reader);
  CHECK(whole > 0);
  CHECK(whole <= s.lines_written + 1);  // and the end record, if the pipe took it
  // A line the pipe took only part of, and that stop() could not finish, is said in a warning.
  if (!tail.empty()) CHECK(logged("bytes of a line it took part of stay unfinished"));
  ::alarm(0);
}

TEST_CASE("a FIFO with a reader that keeps up gets every line, whole", "[sinks]") {
  ::alarm(60);
  const std::string fifo = fresh_fifo("good_reader");
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  REQUIRE(steptrace::start(steptrace_test::host_config(fifo)));
  // A reader on its own thread, as a pipeline's next program would be: reads until stop() closes the log.
  ::fcntl(reader, F_SETFL, ::fcntl(reader, F_GETFL) & ~O_NONBLOCK);
  // A pipe that holds all 100 lines (~0.7 MB, eleven times the default 64 KiB): "keeps up" must not
  // depend on this thread being scheduled within the writer's 20 ms wait on a loaded machine.
  CHECK(::fcntl(reader, F_SETPIPE_SZ, 1 << 20) >= (1 << 20));
  std::string content;
  std::thread reading([&] { content = drain(reader); });
  steps(100);
  const auto s = steptrace::stop();
  reading.join();
  ::close(reader);
  std::string tail;
  CHECK(parse_whole_lines(content, tail) == 101);  // 100 step lines and the end record
  CHECK(tail.empty());
  CHECK(s.lines_written == 100);
  CHECK(s.lines_failed == 0);
  ::alarm(0);
}

TEST_CASE("a log that ends in a killed run's fragment: the fragment is ended, the new lines stand alone", "[sinks]") {
  const std::string log = steptrace_test::fresh_log("sinks_fragment");
  {
    std::ofstream(log) << "{\"schema\":\"steptrace.step/1\",\"global_step\":0}\n{\"schema\":\"steptrace.st";  // cut mid-line
  }
  REQUIRE(steptrace::start(steptrace_test::host_config(log)));
  for (int i = 0; i < 2; ++i) {
    TRACE_STEP();
  }
  steptrace::stop();
  CHECK(logged("ended in part of a line"));
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  REQUIRE(lines.size() == 5);  // the old line, the fragment on its own, 2 steps, the end record
  CHECK(lines[1] == "{\"schema\":\"steptrace.st");
  for (std::size_t i = 2; i < lines.size(); ++i) CHECK_NOTHROW(nlohmann::json::parse(lines[i]));
  CHECK(nlohmann::json::parse(lines[2])["global_step"] == 0);
}

TEST_CASE("one writer per log: a second process writes beside it and says so; every file holds whole lines", "[sinks]") {
  const std::string log = steptrace_test::fresh_log("sinks_shared");
  // A process that holds the log (its lock): this one's lines go to <stem>.pid<PID>.jsonl.
  const std::string mine = steptrace::per_process_log_path(log, ::getpid());
  std::remove(mine.c_str());
  CHECK(mine == "sinks_shared.pid" + std::to_string(::getpid()) + ".jsonl");
  const int holder = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  REQUIRE(holder >= 0);
  REQUIRE(::flock(holder, LOCK_EX | LOCK_NB) == 0);
  REQUIRE(steptrace::start(steptrace_test::host_config(log)));
  steps(3);
  steptrace::stop();
  ::close(holder);
  CHECK(logged("the log 'sinks_shared.jsonl' is being written by another process"));
  CHECK(logged("this process writes '" + mine + "'"));
  std::ifstream in(mine);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string tail;
  CHECK(parse_whole_lines(content, tail) == 4);  // 3 steps and the end record
  CHECK(tail.empty());
  struct stat st {};
  REQUIRE(::stat(log.c_str(), &st) == 0);
  CHECK(st.st_size == 0);  // the holder's file: nothing of this process's
  // The lock goes with the writer: the log is this process's again once the holder has closed it.
  REQUIRE(steptrace::start(steptrace_test::host_config(log)));
  steps(1);
  steptrace::stop();
  std::ifstream again(log);
  std::string own((std::istreambuf_iterator<char>(again)), std::istreambuf_iterator<char>());
  CHECK(parse_whole_lines(own, tail) == 2);
  std::remove(mine.c_str());
}

TEST_CASE("one writer per log: three processes started on one log write three files of whole lines", "[sinks]") {
  const std::string log = steptrace_test::fresh_log("sinks_three");
  std::vector<pid_t> children;
  for (int c = 0; c < 3; ++c) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const bool ok = steptrace::start(steptrace_test::host_config(log));
      steps(30);
      steptrace::stop();
      ::_exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  // Each child's lines are in the log or in its own file beside it, never torn, each with its end record.
  std::size_t files = 0, ends = 0, lines = 0;
  std::vector<std::string> paths{log};
  for (pid_t pid : children) paths.push_back(steptrace::per_process_log_path(log, pid));
  for (const auto& path : paths) {
    std::ifstream in(path);
    if (!in) continue;
    ++files;
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string tail;
    lines += parse_whole_lines(content, tail);
    CHECK(tail.empty());
    for (std::size_t at = content.find("\"event\":\"end\""); at != std::string::npos; at = content.find("\"event\":\"end\"", at + 1)) ++ends;
    std::remove(path.c_str());
  }
  CHECK(lines == 3 * 31);
  CHECK(ends == 3);
  CHECK(files >= 1);
  CHECK(files <= 3);
}

TEST_CASE("one writer per log: a forked child does not keep the log's lock past its parent's run", "[sinks]") {
  const std::string log = steptrace_test::fresh_log("sinks_fork_lock");
  REQUIRE(steptrace::start(steptrace_test::host_config(log)));
  steps(2);
  int go[2];
  REQUIRE(::pipe(go) == 0);
  const pid_t child = ::fork();  // a DataLoader worker: outlives the parent's run
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(go[1]);
    char c;
    while (::read(go[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(go[0]);
  steptrace::stop();
  steptrace_test::captured_log().str("");
  REQUIRE(steptrace::start(steptrace_test::host_config(log)));  // the child still runs
  steps(1);
  steptrace::stop();
  ::close(go[1]);  // the child ends
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  // Right after fork() the child has not run its fork handler yet: stop() releasing the lock is what
  // makes the second run's log its own at once.
  std::ifstream in(log);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string tail;
  CHECK(parse_whole_lines(content, tail) == 5);  // 2 steps + end, 1 step + end: both runs in the log
  const std::string beside = steptrace::per_process_log_path(log, ::getpid());
  CHECK_FALSE(std::ifstream(beside).good());
  std::remove(beside.c_str());
}
