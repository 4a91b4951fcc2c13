// The epoll backend of core::reactor (temporary stand-in: io_uring is required until the epoll
// backend lands).
#include <system_error>

#include "spindle/core/reactor.hpp"
#include "core/reactor_common.hpp"

namespace spindle::core {

std::unique_ptr<reactor> make_epoll_reactor() {
  throw std::system_error(ENOSYS, std::system_category(), "spindle: epoll backend not built yet");
}

}  // namespace spindle::core
