// The epoll backend of core::reactor (contract in include/spindle/core/reactor.hpp): the fallback
// when io_uring cannot be set up, or the one SPINDLE_IO_BACKEND=epoll asks for.
//
// Who takes part:
//   - the owner (the executor's thread, or the shutdown thread once the owner stopped): the only
//     one that touches the epoll set, the operation lists, the per-descriptor states and the
//     operations themselves; it does every system call of an operation and runs the callbacks.
//   - anyone: unpark(), through `parking_` (park_state, the one atomic of this backend: its
//     transitions are commented in reactor_common.hpp) and a write to the wake-up eventfd.
//
// Where an operation is, from submit() to its callback (each operation is on exactly one list,
// linked through next_waiting, and on `in_flight_` until its result is known):
//   queued   - submitted, not attempted yet (`queued_`, FIFO). submit() only queues: the next
//              poll()/wait() attempts it.
//   waiting  - attempted, the descriptor was not ready (EAGAIN): on its descriptor's `readers`
//              (read, recv, recvmsg, accept), `writers` (write, send, sendmsg, connect) or
//              `pollers` (poll) list, in submission order. When epoll reports the descriptor,
//              the waiting operations of the direction it reports are retried in order until one
//              gets EAGAIN again (it keeps its place; the ones behind it wait for the next edge).
//              A new operation for a direction that has waiting ones joins the end of the list
//              without an attempt, so operations on one descriptor and direction complete in
//              submission order.
//   done     - the result is known (`completed_`, counted in `undelivered_`, and still counted
//              by in_flight(), so the executor keeps polling until it is delivered): the
//              callback runs at the end of the poll()/wait()/drain() that found it, once the
//              lists are consistent again (a callback may submit or cancel).
// Regular files, directories and block devices are never "not ready": their operations are done
// synchronously when attempted (pread/pwrite/fsync/fdatasync), as are close and fsync on any
// descriptor.
//
// Descriptors: one epoll registration per descriptor (EPOLLIN | EPOLLOUT | EPOLLRDHUP |
// EPOLLET, data = the descriptor number, never a pointer, so a late event for a descriptor we
// forgot is a lookup that finds nothing), added the first time an operation on it must wait,
// removed by the close opcode, and also when an event finds no operation of ours waiting on it
// (the task that used it moved to another executor's reactor: otherwise each of its readiness
// changes would wake this one for nothing). Edge-triggered, so nothing is re-armed: an event is
// queued for every readiness change after registration, and an operation that got EAGAIN is
// retried at the next one. The state of a descriptor (its kind, whether it is registered) is
// probed once (fstat, fcntl) and kept until the close opcode drops it; the table is indexed by
// descriptor number and grows only for descriptors that are open.
// A descriptor closed outside the reactor (net's synchronous destructor close) loses its
// registration in the kernel without our knowing, and its number may come back for a new file.
// So whenever a descriptor goes from no waiting operation to one, the registration is confirmed
// with EPOLL_CTL_MOD (ENOENT: it is a different file now; probe it again and ADD it): one
// system call per wait rather than per attempt, which also re-reports the current readiness (a
// spurious retry at worst). Until that point the cached kind may be stale; that is harmless for
// O_NONBLOCK descriptors, because their calls do not depend on it: read/write are read(2)/
// write(2), or pread/pwrite when an offset is given, falling back to read/write on ESPIPE (a
// stream ignores the offset, as with io_uring).
//
// The user's descriptor flags are never changed. Spindle's descriptors are O_NONBLOCK; for a
// blocking one, socket calls use MSG_DONTWAIT and everything else is attempted only after
// poll(2) with a zero timeout says the descriptor is ready; a write to a blocking non-socket
// descriptor is capped at PIPE_BUF bytes (a pipe that polls writable takes that much without
// blocking: a short write, which write(2) allows). connect() on a blocking socket blocks until
// the handshake ends (there is no MSG_DONTWAIT for it), and a blocking descriptor whose number
// was reused behind our back may be attempted once with the old kind. recv's MSG_WAITALL is not
// emulated: the result is what the socket had (a short read). A unix connect()'s EAGAIN (the
// listener's backlog is full) is the result, not a wait: nothing on this socket signals room.
//
// Cancellation (cancel(id)): the id is looked up by address in `in_flight_` (nothing is
// dereferenced unless found there); a queued or waiting operation is unlinked and completes with
// -ECANCELED. A close opcode completes the operations still waiting on that descriptor with
// -ECANCELED too (they could never be woken: the registration is gone and the number may be
// reused). drain() performs queued closes (cancelling one would leak the descriptor) and
// completes everything else with -ECANCELED.
//
// Parking (park_driver, park_state as for uring): wait() consumes a pending notification, or
// attempts the queued operations and returns if anything completed. Otherwise, with operations
// waiting for readiness, it moves `parking_` running -> parked_kernel and blocks in epoll_wait
// (timeout in milliseconds, rounded up); with none, it parks on the state word (a futex, cheaper
// to wake). unpark() exchanges the state to notified and makes a system call only if it replaced
// a parked state: a futex wake-up, or a write to the eventfd (registered level-triggered in the epoll
// set; the owner reads it empty when it fires).
#include <fcntl.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <system_error>
#include <vector>

#include "spindle/core/reactor.hpp"
#include "core/reactor_common.hpp"

namespace spindle::core {
namespace {

constexpr std::uint64_t wake_key = ~std::uint64_t(0);  // epoll data of the wake-up eventfd
constexpr std::uint32_t fd_events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
constexpr int event_capacity = 128;
// attempt()'s answer when the descriptor is not ready (never a result: results are >= -4095).
constexpr std::int32_t not_ready = INT32_MIN;
// op->result of a connect whose connect() said EINPROGRESS (the result is ours until the
// callback): its retries read SO_ERROR instead of connecting again.
constexpr std::int32_t connect_started = -EINPROGRESS;


// What the reactor knows about one descriptor number (owner only).
struct fd_state {
  bool known = false;        // probed (the fields below are meaningful)
  bool synchronous = false;  // regular file, directory, block device: never "not ready"
  bool socket = false;
  bool blocking = false;     // O_NONBLOCK clear: attempts are gated on poll(2)
  bool registered = false;   // in the epoll set (as far as we know: see the MOD check)
  operation_fifo readers;
  operation_fifo writers;
  operation_fifo pollers;
  bool idle() const noexcept { return readers.empty() && writers.empty() && pollers.empty(); }
};

enum class direction : std::uint8_t { none, read, write, poll };

direction direction_of(const io_operation* op) noexcept {
  switch (op->opcode) {
    case io_opcode::read:
    case io_opcode::recv:
    case io_opcode::recvmsg:
    case io_opcode::accept:
      return direction::read;
    case io_opcode::write:
    case io_opcode::writev:
    case io_opcode::send:
    case io_opcode::sendmsg:
    case io_opcode::connect:
      return direction::write;
    case io_opcode::poll:
      return direction::poll;
    case io_opcode::fsync:
    case io_opcode::close:
    case io_opcode::statx:
      return direction::none;
  }
  return direction::none;
}

std::int32_t result_of(long rc) noexcept { return rc < 0 ? -errno : std::int32_t(rc); }

// Whether poll(2) reports `fd` ready for `events` now (errors and hang-ups count: the call then
// reports them itself).
bool ready_now(int fd, short events) noexcept {
  pollfd p{fd, events, 0};
  int rc;
  do {
    rc = ::poll(&p, 1, 0);
  } while (rc < 0 && errno == EINTR);
  return rc != 0;  // an error of poll itself: let the call report it
}

class epoll_reactor final : public reactor {
 public:
  epoll_reactor() {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) throw std::system_error(errno, std::system_category(), "spindle: epoll_create1");
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) {
      const int error = errno;
      ::close(epoll_fd_);
      throw std::system_error(error, std::system_category(), "spindle: eventfd");
    }
    epoll_event wake{};
    wake.events = EPOLLIN;  // level-triggered: it fires until we read it empty
    wake.data.u64 = wake_key;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake) != 0) {
      const int error = errno;
      ::close(wake_fd_);
      ::close(epoll_fd_);
      throw std::system_error(error, std::system_category(), "spindle: epoll_ctl(eventfd)");
    }
  }
  ~epoll_reactor() override {
    drain();
    ::close(wake_fd_);
    ::close(epoll_fd_);
  }

  io_backend backend() const noexcept override { return io_backend::epoll; }

  void submit(io_operation* operation) noexcept override {
    trace_event(trace_kind::io_submit, std::uint64_t(operation->fd), trace_ref(operation),
                std::uint32_t(operation->opcode));
    operation->result = 0;  // ours until the callback (connect_started lives here)
    in_flight_.insert(operation);
    count_submitted();
    queued_.push_back(operation);
  }

  void cancel(std::uintptr_t operation_id) noexcept override {
    io_operation* op = find_in_flight(operation_id);
    if (op == nullptr) return;  // completed (or never ours): nothing to do
    if (!unlink(op)) return;    // not on any list: cannot happen, but never complete twice
    finish(op, -ECANCELED);
  }

  void poll() noexcept override {
    attempt_queued();
    if (waiting_ != 0) reap_events(0);
    deliver();
  }

  std::size_t in_flight() const noexcept override { return in_flight_.size() + undelivered_; }

  void drain() noexcept override {
    while (!in_flight_.empty() || undelivered_ != 0) {
      operation_fifo queued = queued_.take_all();
      while (io_operation* op = queued.pop_front()) {
        if (op->opcode == io_opcode::close) {
          finish(op, close_now(op->fd));
        } else {
          finish(op, -ECANCELED);
        }
      }
      for (fd_state& state : states_) cancel_waiters(state);
      deliver();  // a callback may submit: go round again until nothing is left
    }
  }

  void wait(std::optional<clock_duration> timeout) noexcept override {
    if (parking_.consume_notification()) {
      poll();
      return;
    }
    attempt_queued();
    if (undelivered_ != 0 || (timeout && timeout->count() <= 0)) {
      if (waiting_ != 0) reap_events(0);
      deliver();
      return;
    }
    if (waiting_ == 0) {
      // Nothing can come from epoll: park on the state word (a futex wake-up is cheaper).
      if (parking_.begin_park(park_state::parked_futex)) {
        parking_.wait_on_futex(timeout);
        parking_.end_park();
      }
      return;
    }
    if (parking_.begin_park(park_state::parked_kernel)) {
      int milliseconds = -1;
      if (timeout) {
        const auto rounded_up = (timeout->count() + 999'999) / 1'000'000;
        milliseconds = int(std::min<std::int64_t>(rounded_up, INT_MAX));
      }
      const int count = epoll_wait(epoll_fd_, events_, event_capacity, milliseconds);
      parking_.end_park();
      // EINTR (or any failure): a spurious return, which the contract allows.
      if (count > 0) handle_events(count);
    } else {
      reap_events(0);  // notified meanwhile: do not block, but take what is ready
    }
    deliver();
  }

  void unpark() noexcept override { parking_.unpark(wake_fd_); }

 private:
  // --- bookkeeping ---------------------------------------------------------------------------

  io_operation* find_in_flight(std::uintptr_t id) const noexcept {
    for (io_operation* op = in_flight_.first(); op != nullptr; op = op->next_in_flight) {
      if (reinterpret_cast<std::uintptr_t>(op) == id) return op;
    }
    return nullptr;
  }

  // Takes an operation known to be in flight off its list (queued_ or a descriptor's).
  bool unlink(io_operation* op) noexcept {
    if (fd_state* state = find_state(op->fd)) {
      operation_fifo* list = list_of(*state, direction_of(op));
      if (list != nullptr && list->remove(op)) {
        --waiting_;
        return true;
      }
    }
    return queued_.remove(op);
  }

  // The result is known: off in_flight_, onto completed_; the callback runs in deliver().
  void finish(io_operation* op, std::int32_t result) noexcept {
    op->result = result;
    in_flight_.remove(op);
    count_completed();
    completed_.push_back(op);
    ++undelivered_;
  }

  void deliver() noexcept {
    while (io_operation* op = completed_.pop_front()) {
      --undelivered_;
      complete(op, fault_hook_);
    }
  }

  fd_state* find_state(int fd) noexcept {
    if (fd < 0 || std::size_t(fd) >= states_.size() || !states_[fd].known) return nullptr;
    return &states_[fd];
  }

  // The state of `fd`, probed on first use; null if the descriptor is not open (errno set).
  // The reference is good until the next call (the table may grow).
  fd_state* probe_state(int fd) noexcept {
    if (fd < 0) {
      errno = EBADF;
      return nullptr;
    }
    if (std::size_t(fd) < states_.size() && states_[fd].known) return &states_[fd];
    fd_state probed;
    if (!probe(fd, probed)) return nullptr;  // not open: the table does not grow for it
    if (std::size_t(fd) >= states_.size()) {
      states_.resize(std::max<std::size_t>(std::size_t(fd) + 1, states_.size() * 2));
    }
    states_[fd] = probed;
    return &states_[fd];
  }

  static bool probe(int fd, fd_state& state) noexcept {
    struct stat info{};
    if (fstat(fd, &info) != 0) return false;
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0) return false;
    state.known = true;
    state.synchronous = S_ISREG(info.st_mode) || S_ISDIR(info.st_mode) || S_ISBLK(info.st_mode);
    state.socket = S_ISSOCK(info.st_mode);
    state.blocking = (flags & O_NONBLOCK) == 0;
    state.registered = false;
    return true;
  }

  static operation_fifo* list_of(fd_state& state, direction d) noexcept {
    switch (d) {
      case direction::read: return &state.readers;
      case direction::write: return &state.writers;
      case direction::poll: return &state.pollers;
      case direction::none: return nullptr;
    }
    return nullptr;
  }

  // Makes sure `fd` is in the epoll set before its first waiting operation is listed. Returns 0
  // or the error to complete the operation with.
  std::int32_t confirm_registration(int fd, fd_state& state) noexcept {
    epoll_event event{};
    event.events = fd_events;
    event.data.u64 = std::uint64_t(fd);
    if (state.registered) {
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event) == 0) return 0;
      if (errno != ENOENT) return -errno;
      // Closed behind our back and the number reused (or dropped by the kernel): a new file.
      state = fd_state{};
      if (!probe(fd, state)) return -errno;
    }
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0 && errno != EEXIST) {
      // EPERM: not pollable, yet the call said EAGAIN; that is its result then.
      return errno == EPERM ? -EAGAIN : -errno;
    }
    state.registered = true;
    return 0;
  }

  // --- attempts ------------------------------------------------------------------------------

  void attempt_queued() noexcept {
    // Only what is queued now: a callback run later may queue more, for the next round.
    operation_fifo queued = queued_.take_all();
    while (io_operation* op = queued.pop_front()) start(op);
  }

  void start(io_operation* op) noexcept {
    const direction d = direction_of(op);
    if (op->opcode == io_opcode::close) {
      finish(op, close_now(op->fd));
      return;
    }
    fd_state* state = probe_state(op->fd);
    if (state == nullptr || d == direction::none) {
      // Not open (the call itself reports EBADF, as for io_uring), or fsync: done now.
      const std::int32_t result = attempt(op, state != nullptr ? *state : fd_state{});
      finish(op, result == not_ready ? -EAGAIN : result);
      return;
    }
    // A regular file is never not ready, so it never waits and its lists stay empty. (Should a
    // state be stale and name a pollable file now, EAGAIN leads to the registration below.)
    operation_fifo& list = *list_of(*state, d);
    if (!list.empty()) {  // behind earlier operations of the same direction: keep the order
      list.push_back(op);
      ++waiting_;
      return;
    }
    const std::int32_t result = attempt(op, *state);
    if (result != not_ready) {
      finish(op, result);
      return;
    }
    if (state->idle()) {
      if (const std::int32_t error = confirm_registration(op->fd, *state); error != 0) {
        finish(op, error);
        return;
      }
    }
    list.push_back(op);
    ++waiting_;
  }

  // One try of `op` on a descriptor of kind `state`: the result, or not_ready.
  static std::int32_t attempt(io_operation* op, const fd_state& state) noexcept {
    for (;;) {
      const std::int32_t result = attempt_once(op, state);
      if (result == -EINTR) continue;
      // EWOULDBLOCK is the same number on Linux. A connect's EAGAIN (a unix listener's backlog
      // is full) is its result: no readiness edge of this socket announces room over there.
      if (result == -EAGAIN && op->opcode != io_opcode::connect) return not_ready;
      return result;
    }
  }

  static std::int32_t attempt_once(io_operation* op, const fd_state& state) noexcept {
    const int fd = op->fd;
    // A blocking descriptor that is neither a file nor (for this call) a MSG_DONTWAIT socket:
    // ask poll(2) first, so the call cannot block the executor.
    const bool gate = state.blocking && !state.synchronous;
    switch (op->opcode) {
      case io_opcode::read:
        if (state.blocking && state.socket) {
          return result_of(::recv(fd, op->buffer, op->length, MSG_DONTWAIT));
        }
        if (gate && !ready_now(fd, POLLIN)) return not_ready;
        if (op->offset >= 0) {
          const std::int32_t result = result_of(::pread(fd, op->buffer, op->length, op->offset));
          if (result != -ESPIPE) return result;  // a stream: the offset means nothing (io_uring)
        }
        return result_of(::read(fd, op->buffer, op->length));
      case io_opcode::write: {
        // write(2) on a socket raises SIGPIPE as the io_uring write does: no MSG_NOSIGNAL.
        if (state.blocking && state.socket) {
          return result_of(::send(fd, op->buffer, op->length, MSG_DONTWAIT));
        }
        if (gate && !ready_now(fd, POLLOUT)) return not_ready;
        if (op->offset >= 0) {
          const std::int32_t result = result_of(::pwrite(fd, op->buffer, op->length, op->offset));
          if (result != -ESPIPE) return result;
        }
        const std::size_t length = gate ? std::min<std::size_t>(op->length, PIPE_BUF) : op->length;
        return result_of(::write(fd, op->buffer, length));
      }
      case io_opcode::writev: {
        // As write, with the iovecs.
        auto* vectors = static_cast<iovec*>(op->buffer);
        const int count = int(op->length);
        if (state.blocking && state.socket) {
          msghdr message{};
          message.msg_iov = vectors;
          message.msg_iovlen = std::size_t(count);
          return result_of(::sendmsg(fd, &message, MSG_DONTWAIT));
        }
        if (gate && !ready_now(fd, POLLOUT)) return not_ready;
        if (op->offset >= 0) {
          const std::int32_t result = result_of(::pwritev(fd, vectors, count, op->offset));
          if (result != -ESPIPE) return result;
        }
        if (gate) {
          // A blocking pipe or the like: POLLOUT promises room for PIPE_BUF bytes, so one write
          // of at most that many from the first non-empty iovec (a short write) cannot block.
          for (int i = 0; i < count; ++i) {
            if (vectors[i].iov_len == 0) continue;
            return result_of(
                ::write(fd, vectors[i].iov_base, std::min<std::size_t>(vectors[i].iov_len, PIPE_BUF)));
          }
          return 0;
        }
        return result_of(::writev(fd, vectors, count));
      }
      case io_opcode::recv:
        return result_of(::recv(fd, op->buffer, op->length, op->flags | MSG_DONTWAIT));
      case io_opcode::send:
        return result_of(
            ::send(fd, op->buffer, op->length, op->flags | MSG_NOSIGNAL | MSG_DONTWAIT));
      case io_opcode::recvmsg:
        return result_of(::recvmsg(fd, op->message, op->flags | MSG_DONTWAIT));
      case io_opcode::sendmsg:
        return result_of(::sendmsg(fd, op->message, op->flags | MSG_NOSIGNAL | MSG_DONTWAIT));
      case io_opcode::accept:
        if (gate && !ready_now(fd, POLLIN)) return not_ready;
        return result_of(
            ::accept4(fd, op->address, op->address_length, SOCK_CLOEXEC | SOCK_NONBLOCK));
      case io_opcode::connect:
        return attempt_connect(op);
      case io_opcode::fsync:
        return result_of((op->flags & IORING_FSYNC_DATASYNC) != 0 ? ::fdatasync(fd) : ::fsync(fd));
      case io_opcode::poll: {
        pollfd p{fd, short(op->flags), 0};
        const int rc = ::poll(&p, 1, 0);
        if (rc < 0) return -errno;
        if (p.revents & POLLNVAL) return -EBADF;
        // io_uring's poll reports the requested events plus errors and hang-ups.
        const auto revents = std::int32_t(p.revents & (op->flags | POLLERR | POLLHUP));
        return revents != 0 ? revents : not_ready;
      }
      case io_opcode::close:
        return -EINVAL;  // handled by close_now
      case io_opcode::statx:
        // Synchronous here, like the regular-file calls (io/directory.hpp sends a stat to a
        // helper thread on this backend instead, so an executor never blocks on it).
        return result_of(::statx(fd, op->path, op->flags, op->length,
                                 static_cast<struct statx*>(op->buffer)));
    }
    return -EINVAL;
  }

  static std::int32_t attempt_connect(io_operation* op) noexcept {
    if (op->result != connect_started) {
      const std::int32_t result = result_of(::connect(op->fd, op->address, op->connect_length));
      if (result != -EINPROGRESS) return result;  // done, or failed (EAGAIN included)
      op->result = connect_started;
      return not_ready;
    }
    // The handshake ends when the socket polls writable (or with an error/hang-up).
    if (!ready_now(op->fd, POLLOUT)) return not_ready;
    int error = 0;
    socklen_t size = sizeof error;
    if (::getsockopt(op->fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return -errno;
    return -error;
  }

  std::int32_t close_now(int fd) noexcept {
    if (fd_state* state = find_state(fd)) {
      if (state->registered) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      cancel_waiters(*state);  // nothing could wake them any more
      *state = fd_state{};
    }
    // No retry on EINTR: Linux has released the descriptor anyway.
    return result_of(::close(fd));
  }

  void cancel_waiters(fd_state& state) noexcept {
    for (operation_fifo* list : {&state.readers, &state.writers, &state.pollers}) {
      while (io_operation* op = list->pop_front()) {
        --waiting_;
        finish(op, -ECANCELED);
      }
    }
  }

  // --- readiness -----------------------------------------------------------------------------

  void reap_events(int timeout_ms) noexcept {
    for (;;) {
      const int count = epoll_wait(epoll_fd_, events_, event_capacity, timeout_ms);
      if (count <= 0) return;
      handle_events(count);
      if (count < event_capacity) return;  // a full batch: there may be more
    }
  }

  void handle_events(int count) noexcept {
    for (int i = 0; i < count; ++i) {
      const epoll_event& event = events_[i];
      if (event.data.u64 == wake_key) {
        std::uint64_t value = 0;
        [[maybe_unused]] ssize_t got = ::read(wake_fd_, &value, sizeof value);
        continue;
      }
      fd_state* state = find_state(int(event.data.u64));
      if (state == nullptr) continue;  // a late event for a descriptor we dropped
      if (state->idle()) {
        // Nothing of ours waits on it: its task moved to another executor (stolen, or handed
        // over by a standby), whose reactor registered it too, or it is between operations.
        // Left registered, every readiness change would wake this reactor for nothing; the
        // next operation that waits here registers it again (confirm_registration: ADD).
        // The descriptor may meanwhile be closed, or reused for another file, by the executor
        // its task moved to: the kernel resolves the number now, and removes nothing that is
        // not in our set (ENOENT), so the race is benign. The raw system call keeps
        // ThreadSanitizer, which treats a descriptor number as memory, from reporting it.
        const int fd = int(event.data.u64);
        if (state->registered &&
            ::syscall(SYS_epoll_ctl, epoll_fd_, EPOLL_CTL_DEL, fd, nullptr) == 0) {
          state->registered = false;
        }
        continue;
      }
      const std::uint32_t mask = event.events;
      if (mask & (EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) retry(*state, state->readers);
      if (mask & (EPOLLOUT | EPOLLERR | EPOLLHUP)) retry(*state, state->writers);
      if (!state->pollers.empty()) retry(*state, state->pollers);
    }
  }

  // Retries the waiting operations of one list in order until one is not ready.
  void retry(const fd_state& state, operation_fifo& list) noexcept {
    while (io_operation* op = list.front()) {
      const std::int32_t result = attempt(op, state);
      if (result == not_ready) return;
      list.pop_front();
      --waiting_;
      finish(op, result);
    }
  }

  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  park_state parking_;
  in_flight_list in_flight_;      // submitted, result not known yet
  operation_fifo queued_;                // submitted, not attempted yet
  operation_fifo completed_;      // result known, callback not run yet
  std::size_t undelivered_ = 0;   // size of completed_
  std::size_t waiting_ = 0;       // operations on descriptors' lists
  std::vector<fd_state> states_;  // indexed by descriptor number
  epoll_event events_[event_capacity]{};
};

}  // namespace

std::unique_ptr<reactor> make_epoll_reactor() { return std::make_unique<epoll_reactor>(); }

}  // namespace spindle::core
