// steptrace/sink/prometheus_http.hpp - the scrape endpoint: a minimal HTTP/1.0 server on its own thread
// that answers GET /metrics with the text exposition, one connection at a time, each bounded (8 KiB of
// request, 1 s to send it and to take the answer). Nothing else: no keep-alive, no TLS (bind it to an
// address that only the scraper reaches, or put it behind the cluster's proxy).
//
// Why not prometheus-cpp's Exposer: its server (civetweb, as Debian builds it) starts its threads with
// a fixed 100 KiB stack, and glibc refuses such a thread when the program's static TLS is larger - as it
// is in any program that links cuBLAS (libcublasLt alone holds 92 KiB of TLS): the Exposer then throws
// "null context when constructing CivetServer" in exactly the programs steptrace is for
// (examples/mlp_train; docs/prometheus.md). This thread takes the default stack.
#pragma once
#include "../version.hpp"
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

STEPTRACE_BEGIN_NAMESPACE namespace sink {

class MetricsServer {
 public:
  MetricsServer() = default;
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  ~MetricsServer() { stop(); }

  /// Listens on `host:port` (`127.0.0.1:9464`, `0.0.0.0:9464`, `[::1]:9464`; port 0 picks a free one)
  /// and serves `body()` at /metrics from a thread of its own. Returns "" or why not.
  std::string start(const std::string& address, std::function<std::string()> body) {
    stop();
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) return "'" + address + "' is not host:port";
    std::string host = address.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    const std::string port = address.substr(colon + 1);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const int gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
    if (gai != 0) return "cannot resolve '" + address + "': " + ::gai_strerror(gai);
    std::string err = "no address for '" + address + "'";
    for (addrinfo* a = found; a && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      const int one = 1;
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
        fd_ = fd;
        break;
      }
      err = "cannot listen on '" + address + "': " + std::strerror(errno);
      ::close(fd);
    }
    ::freeaddrinfo(found);
    if (fd_ < 0) return err;
    sockaddr_storage bound{};
    socklen_t len = sizeof bound;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
      port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    body_ = std::move(body);
    stopping_ = false;
    try {
      thread_ = std::thread([this] { serve(); });
    } catch (const std::exception& e) {
      ::close(fd_);
      fd_ = -1;
      return std::string("cannot start the endpoint's thread: ") + e.what();
    }
    return {};
  }

  int port() const { return fd_ >= 0 ? port_ : 0; }

  /// Within ~0.1 s plus the request being answered (at most ~2 s).
  void stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  void serve() {
    while (!stopping_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      answer(c);
      ::close(c);
    }
  }

  void answer(int c) {
    timeval t{1, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t);
    ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t);
    std::string req;
    char buf[2048];
    while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos && req.size() < 8192) {
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      req.append(buf, static_cast<std::size_t>(n));
    }
    const auto sp1 = req.find(' '), sp2 = req.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos) return send_all(c, response(400, "text/plain", "bad request\n", true));
    const std::string method = req.substr(0, sp1);
    std::string path = req.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    const bool head = method == "HEAD";
    if (method != "GET" && !head) return send_all(c, response(405, "text/plain", "only GET\n", true));
    if (path == "/metrics") {
      std::string text;
      try {
        text = body_();
      } catch (...) {
        return send_all(c, response(500, "text/plain", "metrics not available\n", true));
      }
      return send_all(c, response(200, "text/plain; version=0.0.4; charset=utf-8", text, !head));
    }
    if (path == "/") return send_all(c, response(200, "text/plain", "steptrace: see /metrics\n", !head));
    send_all(c, response(404, "text/plain", "not found: try /metrics\n", !head));
  }

  static std::string response(int code, const char* type, const std::string& body, bool with_body) {
    const char* reason = code == 200 ? "OK" : code == 400 ? "Bad Request" : code == 404 ? "Not Found"
                                            : code == 405 ? "Method Not Allowed" : "Internal Server Error";
    std::string r = "HTTP/1.0 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
                    "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    if (with_body) r += body;
    return r;
  }

  static void send_all(int c, const std::string& data) {
    std::size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::send(c, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the scraper went away or stalled past the timeout
      done += static_cast<std::size_t>(n);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::function<std::string()> body_;
  std::thread thread_;
};

} STEPTRACE_END_NAMESPACE  // steptrace::sink
