// Signals through a signalfd read by the reactor: contract in include/spindle/io/signals.hpp.
#include "spindle/io/signals.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

#include "spindle/io/io_wait.hpp"

namespace spindle::io {
namespace {

[[noreturn]] void throw_error(int error, const char* call) {
  throw std::system_error(error, std::system_category(), std::string("spindle: ") + call);
}

sigset_t make_mask(std::span<const int> signals, const char* call, bool reject_uncatchable) {
  sigset_t mask;
  sigemptyset(&mask);
  for (const int signo : signals) {
    if (reject_uncatchable && (signo == SIGKILL || signo == SIGSTOP)) throw_error(EINVAL, call);
    if (sigaddset(&mask, signo) != 0) throw_error(EINVAL, call);
  }
  return mask;
}

void block_mask(const sigset_t& mask) {
  // pthread_sigmask returns the error number instead of setting errno.
  if (const int error = pthread_sigmask(SIG_BLOCK, &mask, nullptr); error != 0) {
    throw_error(error, "pthread_sigmask");
  }
}

}  // namespace

void block_signals(std::span<const int> signals) {
  block_mask(make_mask(signals, "sigaddset", false));
}

void block_signals(std::initializer_list<int> signals) {
  block_signals(std::span<const int>(signals.begin(), signals.size()));
}

signal_set::signal_set(std::initializer_list<int> signals)
    : signal_set(std::span<const int>(signals.begin(), signals.size())) {}

signal_set::signal_set(std::span<const int> signals)
    : mask_(make_mask(signals, "signal_set", true)) {
  block_mask(mask_);
  fd_ = ::signalfd(-1, &mask_, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd_ < 0) throw_error(errno, "signalfd");
}

signal_set::signal_set(signal_set&& other) noexcept
    : mask_(other.mask_), fd_(std::exchange(other.fd_, -1)) {}

signal_set& signal_set::operator=(signal_set&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    mask_ = other.mask_;
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

signal_set::~signal_set() {
  if (fd_ >= 0) ::close(fd_);
}

bool signal_set::contains(int signo) const noexcept { return sigismember(&mask_, signo) == 1; }

task<signal_info> signal_set::wait_info() {
  signalfd_siginfo siginfo{};
  for (;;) {
    core::io_operation read{};
    read.opcode = core::io_opcode::read;
    read.fd = fd_;
    read.buffer = &siginfo;
    read.length = sizeof siginfo;
    read.offset = -1;  // a stream: no position
    const std::int32_t result = co_await submit_and_wait(read);
    if (result == std::int32_t(sizeof siginfo)) {
      signal_info info;
      info.signo = int(siginfo.ssi_signo);
      info.code = siginfo.ssi_code;
      info.pid = pid_t(siginfo.ssi_pid);
      info.uid = uid_t(siginfo.ssi_uid);
      info.value = siginfo.ssi_int;
      co_return info;
    }
    if (result >= 0) throw_error(EIO, "read");  // a signalfd reads whole records only
    if (result == -EINTR) continue;
    if (result != -EAGAIN) throw_error(-result, "read");
    // Nothing pending (for this thread): wait until the signalfd is readable, then read again.
    // Another waiter may take the signal first; its -EAGAIN then brings us back here.
    core::io_operation poll{};
    poll.opcode = core::io_opcode::poll;
    poll.fd = fd_;
    poll.flags = POLLIN;
    const std::int32_t ready = co_await submit_and_wait(poll);
    if (ready < 0 && ready != -EINTR && ready != -EAGAIN) throw_error(-ready, "poll");
  }
}

task<int> signal_set::wait() {
  const signal_info info = co_await wait_info();
  co_return info.signo;
}

}  // namespace spindle::io
