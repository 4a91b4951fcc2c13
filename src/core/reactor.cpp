// Backend selection: the one place that decides between io_uring and epoll (reactor.hpp).
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "spindle/core/reactor.hpp"
#include "core/reactor_common.hpp"

namespace spindle::core {

const char* to_string(io_backend backend) noexcept {
  switch (backend) {
    case io_backend::automatic: return "automatic";
    case io_backend::uring: return "io_uring";
    case io_backend::epoll: return "epoll";
  }
  return "unknown";
}

std::unique_ptr<reactor> make_reactor(io_backend requested) {
  return make_reactor(requested, reactor_options{});
}

std::unique_ptr<reactor> make_reactor(io_backend requested, const reactor_options& options) {
  if (requested == io_backend::automatic) {
    if (const char* forced = std::getenv("SPINDLE_IO_BACKEND")) {
      if (std::strcmp(forced, "epoll") == 0) requested = io_backend::epoll;
      if (std::strcmp(forced, "uring") == 0 || std::strcmp(forced, "io_uring") == 0) {
        requested = io_backend::uring;
      }
    }
  }
  if (requested != io_backend::epoll) {
    int error = 0;
    if (auto uring = make_uring_reactor(options, error)) return uring;
    // ENOSYS (no io_uring), EPERM (seccomp, io_uring_disabled), ENOMEM (locked-memory limit):
    // fall back, unless io_uring was demanded explicitly.
    if (requested == io_backend::uring) {
      throw std::system_error(error, std::system_category(), "spindle: io_uring set-up failed");
    }
  }
  return make_epoll_reactor();
}

}  // namespace spindle::core
