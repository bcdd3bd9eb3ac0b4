// steptrace/details/log.hpp - the named spdlog logger "steptrace" and warn-once.
// The host program's default logger, global level and pattern are never touched. If the program
// registered a logger named "steptrace" before start(), steptrace uses that one as it is.
#pragma once
#include "../version.hpp"
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

STEPTRACE_BEGIN_NAMESPACE namespace details {

// The statics below are never destroyed: the background thread may still log while a program that
// skipped stop() runs its static destructors.
/// Set in a fork's child (details/fork.hpp): the parent's logger may have been writing, its sink's lock
/// held by a thread the child does not have.
inline std::atomic<bool>& logger_forked() {
  static std::atomic<bool> forked{false};
  return forked;
}
inline std::shared_ptr<spdlog::logger> make_own_logger() {
  auto created = std::make_shared<spdlog::logger>("steptrace", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  created->set_level(spdlog::level::info);
  created->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [steptrace] [%l] %v");
  return created;
}
inline std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger>* instance = new std::shared_ptr<spdlog::logger>([] {
    if (auto existing = spdlog::get("steptrace")) return existing;
    auto created = make_own_logger();
    try {
      spdlog::register_logger(created);
    } catch (...) {  // registered by another thread meanwhile: use that one
      if (auto existing = spdlog::get("steptrace")) return existing;
    }
    return created;
  }());
  if (logger_forked().load(std::memory_order_acquire)) {
    // A fork's child: a logger of its own, outside spdlog's registry (whose lock may have been held
    // at the fork; the console lock its sink takes is held across the fork: details/fork.hpp). A
    // program's own "steptrace" logger is not used in a child. Made once (a grandchild keeps it).
    static const std::shared_ptr<spdlog::logger>* child = new std::shared_ptr<spdlog::logger>(make_own_logger());
    return *child;
  }
  return *instance;
}

/// Logs `message` at warn level the first time `key` is seen; returns true if it logged.
inline std::mutex& warn_once_mutex() {  // also held across fork() (details/fork.hpp)
  static std::mutex* mutex = new std::mutex;
  return *mutex;
}
inline bool warn_once(const std::string& key, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(warn_once_mutex());
    // Made under the lock fork() holds (details/fork.hpp): a fork can never land while another thread
    // is making it, which would leave its guard held in the child for good.
    static std::set<std::string>* seen = new std::set<std::string>;
    if (!seen->insert(key).second) return false;
  }
  try {
    logger()->warn("{}", message);
  } catch (...) {
  }
  return true;
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
