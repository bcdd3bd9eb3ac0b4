// steptrace/details/log.hpp - the named spdlog logger "steptrace" and warn-once.
// The host program's default logger, global level and pattern are never touched. If the program
// registered a logger named "steptrace" before start(), steptrace uses that one as it is.
#pragma once
#include "../version.hpp"
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

STEPTRACE_BEGIN_NAMESPACE namespace details {

// The statics below are never destroyed: the background thread may still log while a program that
// skipped stop() runs its static destructors.
inline std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger>* instance = new std::shared_ptr<spdlog::logger>([] {
    if (auto existing = spdlog::get("steptrace")) return existing;
    auto created = std::make_shared<spdlog::logger>("steptrace", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    created->set_level(spdlog::level::info);
    created->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [steptrace] [%l] %v");
    try {
      spdlog::register_logger(created);
    } catch (...) {  // registered by another thread meanwhile: use that one
      if (auto existing = spdlog::get("steptrace")) return existing;
    }
    return created;
  }());
  return *instance;
}

/// Logs `message` at warn level the first time `key` is seen; returns true if it logged.
inline bool warn_once(const std::string& key, const std::string& message) {
  static std::mutex* mutex = new std::mutex;
  static std::set<std::string>* seen = new std::set<std::string>;
  {
    std::lock_guard<std::mutex> lock(*mutex);
    if (!seen->insert(key).second) return false;
  }
  try {
    logger()->warn("{}", message);
  } catch (...) {
  }
  return true;
}

} STEPTRACE_END_NAMESPACE  // steptrace::details
