// spindle-top: a terminal view of a running spindle program's live view (docs/design/
// diagnostics.md, "Live view (G5)"). Reads GET /api/snapshot once a second with a plain socket
// and prints the executors and the busiest tasks.
//
//   spindle-top 127.0.0.1:9100          (default: the value of SPINDLE_DIAGNOSTICS)
//   spindle-top 127.0.0.1:9100 --once   (one report, no screen clearing: scripts, tests)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using json = nlohmann::json;

// GET target from host:port (IPv4 literal or localhost); empty on any failure.
std::string http_get(const std::string& host, int port, const std::string& target) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &a.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return {};
  }
  const std::string request = "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != ssize_t(request.size())) {
    ::close(fd);
    return {};
  }
  std::string answer;
  char buffer[16384];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) <= 0) break;  // the server answers at once or not at all
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    answer.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  const auto body = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.1 200", 0) != 0 || body == std::string::npos) return {};
  return answer.substr(body + 4);
}

double number(const json& o, const char* key, double otherwise = 0) {
  const auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<double>() : otherwise;
}
std::string text(const json& o, const char* key) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}
std::string duration(double ns) {
  char out[32];
  if (ns < 1e6) std::snprintf(out, sizeof out, "%.1fus", ns / 1e3);
  else if (ns < 1e9) std::snprintf(out, sizeof out, "%.1fms", ns / 1e6);
  else std::snprintf(out, sizeof out, "%.2fs", ns / 1e9);
  return out;
}
std::string clip(std::string s, std::size_t width) {
  if (s.size() > width) s = s.substr(0, width - 1) + "~";
  return s;
}

void report(const json& s, const std::string& where) {
  std::printf("spindle-top  %s\n\n", where.c_str());
  const json executors = s.value("executors", json::array());
  std::printf("%-10s %7s %10s %10s %8s %8s %8s\n", "executor", "util", "busy", "polls", "steals",
              "parks", "queued");
  for (const json& e : executors) {
    double queued = 0;
    if (auto q = e.find("queues"); q != e.end() && q->is_object()) {
      for (const auto& [k, v] : q->items()) queued += v.is_number() ? v.get<double>() : 0;
    }
    double u = number(e, "utilisation");
    if (u > 1.0) u /= 100;
    std::printf("%-10s %6.1f%% %10s %10.0f %8.0f %8.0f %8.0f\n",
                ("#" + text(e, "index") + " " + text(e, "kind")).c_str(), u * 100,
                duration(number(e, "busy_ns")).c_str(), number(e, "polls"), number(e, "steals"),
                number(e, "parks"), queued);
  }
  std::vector<json> tasks;
  for (const json& t : s.value("tasks", json::array())) tasks.push_back(t);
  std::sort(tasks.begin(), tasks.end(), [](const json& a, const json& b) {
    return number(a, "busy_ns") > number(b, "busy_ns");
  });
  std::printf("\ntasks: %s live\n", text(s, "live_tasks").empty() ? std::to_string(tasks.size()).c_str()
                                                                  : text(s, "live_tasks").c_str());
  if (!tasks.empty()) {
    std::printf("%-8s %-24s %-10s %-32s %4s %8s %10s\n", "id", "name", "state", "waiting on", "exec",
                "polls", "busy");
    for (std::size_t i = 0; i < tasks.size() && i < 20; ++i) {
      const json& t = tasks[i];
      std::printf("%-8s %-24s %-10s %-32s %4s %8.0f %10s\n", clip(text(t, "id"), 8).c_str(),
                  clip(text(t, "name"), 24).c_str(), clip(text(t, "state"), 10).c_str(),
                  clip(text(t, "waiting_on"), 32).c_str(), clip(text(t, "executor"), 4).c_str(),
                  number(t, "polls"), duration(number(t, "busy_ns")).c_str());
    }
  } else {
    for (const json& n : s.value("named_tasks", json::array())) {
      std::printf("  %-32s live x%s\n", clip(text(n, "name"), 32).c_str(), text(n, "live").c_str());
    }
  }
  const json warnings = s.value("warnings", json::array());
  std::printf("\nwarnings: %zu\n", warnings.size());
  for (std::size_t i = 0; i < warnings.size() && i < 10; ++i) {
    const json& w = warnings[i];
    std::printf("  %s\n", w.is_object() ? (text(w, "kind") + ": " + text(w, "message")).c_str()
                                        : w.dump().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string address;
  bool once = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--once") == 0) once = true;
    else address = argv[i];
  }
  if (address.empty() && std::getenv("SPINDLE_DIAGNOSTICS") != nullptr) {
    address = std::getenv("SPINDLE_DIAGNOSTICS");
  }
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    std::fprintf(stderr, "usage: spindle-top HOST:PORT [--once]   (an IPv4 host, e.g. 127.0.0.1:9100)\n");
    return 2;
  }
  const std::string host = address.substr(0, colon);
  const int port = std::atoi(address.c_str() + colon + 1);
  for (;;) {
    const std::string body = http_get(host, port, "/api/snapshot");
    json snapshot = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!once) std::printf("\x1b[H\x1b[2J");  // home, clear
    if (body.empty() || snapshot.is_discarded()) {
      std::printf("spindle-top: no snapshot from http://%s/api/snapshot\n", address.c_str());
      if (once) return 1;
    } else {
      report(snapshot, address);
      if (once) return 0;
    }
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}
