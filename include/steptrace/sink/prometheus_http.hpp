// steptrace/sink/prometheus_http.hpp - the scrape endpoint: a minimal HTTP/1.0 server on its own thread
// that answers GET /metrics with the text exposition. One thread polls the listening socket and up to
// kMaxClients connections at once, so an idle or slow client delays no one else; each connection has
// one deadline (kClientSeconds from its accept) for its request and its answer, after which it is
// closed; stop() ends the thread within one poll period (kPollMs) whatever the clients do. No
// keep-alive, no TLS: bind it to an address that only the scraper reaches. The host must be numeric
// (no DNS lookup on the training thread at start()); `localhost` means 127.0.0.1, an empty host every
// interface.
//
// Why not prometheus-cpp's Exposer: its server (civetweb, as Debian builds it) starts its threads with
// a fixed 100 KiB stack, and glibc refuses such a thread when the program's static TLS is larger - as it
// is in any program that links cuBLAS (libcublasLt alone holds 92 KiB of TLS): the Exposer then throws
// "null context when constructing CivetServer" in exactly the programs steptrace is for
// (examples/mlp_train; docs/prometheus.md). This thread takes the default stack.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

STEPTRACE_BEGIN_NAMESPACE namespace sink {

class MetricsServer {
 public:
  static constexpr int kMaxClients = 16;          // beyond, the oldest connection is closed
  static constexpr double kClientSeconds = 2.0;   // a connection's whole life: request and answer
  static constexpr int kPollMs = 100;
  static constexpr std::size_t kMaxRequest = 8192;

  MetricsServer() {
    for (auto& open : open_clients_) open.store(-1, std::memory_order_relaxed);
  }
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  ~MetricsServer() { stop(); }

  /// Listens on `host:port` (`127.0.0.1:9464`, `0.0.0.0:9464`, `[::1]:9464`, `:9464`; port 0 picks a
  /// free one) and serves `body()` at /metrics from a thread of its own. Returns "" or why not.
  std::string start(const std::string& address, std::function<std::string()> body) {
    stop();
    const auto colon = address.rfind(':');
    if (colon == std::string::npos) return "'" + address + "' is not host:port";
    std::string host = address.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host == "localhost") host = "127.0.0.1";
    const std::string port = address.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
      return "'" + address + "': the port is not a number 0 - 65535";
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_NUMERICHOST;
    addrinfo* found = nullptr;
    const int gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
    if (gai != 0) return "'" + address + "': " + ::gai_strerror(gai) + " (the host must be a numeric address)";
    std::string err = "no address for '" + address + "'";
    for (addrinfo* a = found; a && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
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

  /// In a fork's child, where the serving thread does not exist: the child's copies of the listening
  /// socket and of every client's closed, nothing else touched (close(2) is async-signal-safe).
  void close_in_child() {
    const int fd = fd_.exchange(-1);
    if (fd >= 0) ::close(fd);
    for (auto& open : open_clients_) {
      const int c = open.exchange(-1);
      if (c >= 0) ::close(c);
    }
  }

  /// Within one poll period (plus one answer being rendered), whatever the clients do.
  void stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    const int fd = fd_.exchange(-1);
    if (fd >= 0) ::close(fd);
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Client {
    int fd = -1;
    Clock::time_point deadline;
    std::string in, out;  // the request so far; the answer not yet sent
    std::size_t sent = 0;
  };

  void serve() {
    std::vector<Client> clients;
    while (!stopping_) {
      std::vector<pollfd> fds{{fd_, POLLIN, 0}};
      for (const auto& c : clients) fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
      if (::poll(fds.data(), fds.size(), kPollMs) < 0) {  // EINTR; or out of memory: wait and try again
        if (errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
        continue;
      }
      const auto now = Clock::now();
      for (std::size_t i = 0; i < clients.size(); ++i) {
        Client& c = clients[i];
        const short ev = fds[i + 1].revents;
        bool done = now > c.deadline || (ev & (POLLERR | POLLNVAL));
        if (!done && (ev & (POLLIN | POLLHUP)) && c.out.empty()) done = !read_request(c);
        if (!done && (ev & POLLOUT) && !c.out.empty()) done = !write_answer(c);
        if (done) {
          close_client(c.fd);
          c.fd = -1;
        }
      }
      clients.erase(std::remove_if(clients.begin(), clients.end(), [](const Client& c) { return c.fd < 0; }), clients.end());
      if (fds[0].revents & POLLIN) {
        const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
          std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));  // out of descriptors: no busy loop
        if (fd >= 0) {
          if (static_cast<int>(clients.size()) >= kMaxClients) {  // the oldest still sending its request gives way
            auto victim = std::find_if(clients.begin(), clients.end(), [](const Client& c) { return c.out.empty(); });
            if (victim == clients.end()) victim = clients.begin();
            close_client(victim->fd);
            clients.erase(victim);
          }
          for (auto& open : open_clients_) {  // a free entry is there: at most kMaxClients are open
            int none = -1;
            if (open.compare_exchange_strong(none, fd)) break;
          }
          Client c;
          c.fd = fd;
          c.deadline = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kClientSeconds));
          clients.push_back(std::move(c));
        }
      }
    }
    for (auto& c : clients) close_client(c.fd);
  }

  /// Forgotten by close_in_child() before it is closed: a fork in between leaves the child a copy
  /// open (harmless), never a number closed twice.
  void close_client(int fd) {
    for (auto& open : open_clients_) {
      int mine = fd;
      if (open.compare_exchange_strong(mine, -1)) break;
    }
    ::close(fd);
  }

  /// Reads what is there; once the request is whole, prepares the answer. False: close it.
  bool read_request(Client& c) {
    char buf[2048];
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
      if (n == 0) return false;  // closed before a whole request
      c.in.append(buf, static_cast<std::size_t>(n));
      if (c.in.size() > kMaxRequest) return false;
      if (c.in.find("\r\n\r\n") != std::string::npos || c.in.find("\n\n") != std::string::npos) break;
    }
    c.out = answer(c.in);
    return true;
  }

  /// Sends what the socket takes. False: all sent, or the client is gone.
  bool write_answer(Client& c) {
    while (c.sent < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
      c.sent += static_cast<std::size_t>(n);
    }
    return false;
  }

  std::string answer(const std::string& req) {
    const auto sp1 = req.find(' '), sp2 = req.find(' ', sp1 == std::string::npos ? sp1 : sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos) return response(400, "text/plain", "bad request\n", true);
    const std::string method = req.substr(0, sp1);
    std::string path = req.substr(sp1 + 1, sp2 - sp1 - 1);
    path = path.substr(0, path.find('?'));
    const bool head = method == "HEAD";
    if (method != "GET" && !head) return response(405, "text/plain", "only GET\n", true);
    if (path == "/metrics") {
      try {
        return response(200, "text/plain; version=0.0.4; charset=utf-8", body_(), !head);
      } catch (...) {
        return response(500, "text/plain", "metrics not available\n", true);
      }
    }
    if (path == "/") return response(200, "text/plain", "steptrace: see /metrics\n", !head);
    return response(404, "text/plain", "not found: try /metrics\n", !head);
  }

  static std::string response(int code, const char* type, const std::string& body, bool with_body) {
    const char* reason = code == 200 ? "OK" : code == 400 ? "Bad Request" : code == 404 ? "Not Found"
                                            : code == 405 ? "Method Not Allowed" : "Internal Server Error";
    std::string r = "HTTP/1.0 " + std::to_string(code) + " " + reason + "\r\nContent-Type: " + type +
                    "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
    if (with_body) r += body;
    return r;
  }

  std::atomic<int> fd_{-1};
  std::array<std::atomic<int>, kMaxClients + 1> open_clients_;  // the clients' sockets, for a fork's child
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::function<std::string()> body_;
  std::thread thread_;
};

} STEPTRACE_END_NAMESPACE  // steptrace::sink
