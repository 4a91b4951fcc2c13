// The io_uring backend of core::reactor (contract in include/spindle/core/reactor.hpp, design
// in docs/design/io.md).
//
// One ring per executor, used only by its owner thread (submissions, reaping, cancellation).
// user_data of an operation's SQE is the operation's address; two reserved values mark the
// reactor's own requests: wake_tag (the read on the wake-up eventfd) and ignore_tag (cancel
// requests, whose own completions carry nothing we need).
//
// Parking (the park_driver contract, park_state in reactor_common.hpp): with operations in
// flight the owner moves running -> parked_kernel, makes sure a read on the eventfd is in
// flight, and waits in io_uring_submit_and_wait_timeout for one completion or the timeout; with
// none it parks on the state word itself (a futex), which is cheaper to wake. unpark() exchanges
// the state to notified and makes a system call only if it replaced a parked state, so waking a
// running executor costs one atomic exchange.
//
// Full submission queue: io_uring_get_sqe returning null means the SQ ring is full; we submit
// (which empties it) and retry. -EBUSY from the submit means the kernel holds overflowed
// completions (IORING_FEAT_NODROP): we reap, then retry. Nothing is ever dropped (I2).
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "spindle/core/reactor.hpp"
#include "core/reactor_common.hpp"

namespace spindle::core {
namespace {

constexpr std::uint64_t wake_tag = 0;
constexpr std::uint64_t ignore_tag = 1;
constexpr unsigned ring_entries = 256;

class uring_reactor final : public reactor {
 public:
  explicit uring_reactor(int& error) {
    // Newest set-up first (Linux 6.1 has all of these): one issuer, task work deferred to our
    // own io_uring_enter calls (completions are processed when we ask, not at arbitrary system
    // call exits where they contend for socket locks), created disabled so the worker thread,
    // not the thread building the executor, becomes the issuer (attach_owner).
    constexpr unsigned preferred =
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED;
    for (const unsigned flags : {preferred, unsigned(IORING_SETUP_COOP_TASKRUN), 0u}) {
      io_uring_params params{};
      params.flags = flags;
      error = -io_uring_queue_init_params(ring_entries, &ring_, &params);
      if (error == 0) {
        setup_flags_ = flags;
        break;
      }
      if (error != EINVAL) return;  // ENOSYS, EPERM, ENOMEM: no io_uring at all
    }
    if (error != 0) return;
    ring_ready_ = true;
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) error = errno;
  }
  ~uring_reactor() override {
    if (ring_ready_) {
      drain();
      io_uring_queue_exit(&ring_);
    }
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  io_backend backend() const noexcept override { return io_backend::uring; }

  void attach_owner() noexcept override {
    // io_uring_enable_rings is declared by Debian's liburing 2.3 but not exported: the raw
    // register call does the same.
    if ((setup_flags_ & IORING_SETUP_R_DISABLED) != 0) {
      syscall(__NR_io_uring_register, ring_.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
    }
  }

  void submit(io_operation* operation) noexcept override {
    io_uring_sqe* sqe = next_sqe();
    prepare(sqe, operation);
    io_uring_sqe_set_data64(sqe, reinterpret_cast<std::uintptr_t>(operation));
    in_flight_.insert(operation);
  }

  void cancel(std::uintptr_t operation_id) noexcept override {
    io_uring_sqe* sqe = next_sqe();
    io_uring_prep_cancel64(sqe, operation_id, 0);
    io_uring_sqe_set_data64(sqe, ignore_tag);
  }

  void poll() noexcept override {
    if ((setup_flags_ & IORING_SETUP_DEFER_TASKRUN) != 0 && !in_flight_.empty()) {
      // Deferred task work runs only inside io_uring_enter: submit and collect in one call.
      int rc;
      do {
        rc = io_uring_submit_and_get_events(&ring_);
        if (rc == -EBUSY) reap();
      } while (rc == -EBUSY || rc == -EINTR);
    } else if (io_uring_sq_ready(&ring_) != 0) {
      submit_queued();
    }
    reap();
  }

  std::size_t in_flight() const noexcept override { return in_flight_.size(); }

  void drain() noexcept override {
    for (io_operation* op = in_flight_.first(); op != nullptr; op = op->next_in_flight) {
      cancel(reinterpret_cast<std::uintptr_t>(op));
    }
    if (wake_read_armed_) cancel(wake_tag);
    while (!in_flight_.empty() || wake_read_armed_) {
      __kernel_timespec ten_ms{0, 10'000'000};
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ten_ms, nullptr);
      reap();
      // A ring that cannot be entered (EEXIST: not the issuer; EBADFD: never enabled) will
      // never complete anything: its requests never reached the kernel.
      if (rc == -EEXIST || rc == -EBADFD || rc == -EBADF) break;
    }
  }

  void wait(std::optional<clock_duration> timeout) noexcept override {
    if (parking_.consume_notification()) {
      poll();
      return;
    }
    if (timeout && timeout->count() <= 0) {
      poll();
      return;
    }
    if (io_uring_sq_ready(&ring_) != 0) submit_queued();
    if (in_flight_.empty()) {
      if (parking_.begin_park(park_state::parked_futex)) {
        parking_.wait_on_futex(timeout);
        parking_.end_park();
      }
      reap();
      return;
    }
    if (!wake_read_armed_) arm_wake_read();
    if (parking_.begin_park(park_state::parked_kernel)) {
      __kernel_timespec relative{};
      __kernel_timespec* relative_pointer = nullptr;
      if (timeout) {
        relative.tv_sec = timeout->count() / 1'000'000'000;
        relative.tv_nsec = timeout->count() % 1'000'000'000;
        relative_pointer = &relative;
      }
      io_uring_cqe* cqe = nullptr;
      int rc;
      do {
        rc = io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, relative_pointer, nullptr);
        if (rc == -EBUSY) reap();  // overflowed completions first
      } while (rc == -EBUSY || rc == -EINTR);
      parking_.end_park();
    }
    reap();
  }

  void unpark() noexcept override { parking_.unpark(wake_fd_); }

 private:
  io_uring_sqe* next_sqe() noexcept {
    for (;;) {
      if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) return sqe;
      submit_queued();  // the SQ ring is full: hand it to the kernel, then there is room
    }
  }

  void submit_queued() noexcept {
    for (;;) {
      const int rc = io_uring_submit(&ring_);
      if (rc >= 0 || (rc != -EBUSY && rc != -EAGAIN && rc != -EINTR)) return;
      reap();  // -EBUSY/-EAGAIN: completions must be reaped before the kernel takes more
    }
  }

  void arm_wake_read() noexcept {
    io_uring_sqe* sqe = next_sqe();
    io_uring_prep_read(sqe, wake_fd_, &wake_buffer_, sizeof wake_buffer_, 0);
    io_uring_sqe_set_data64(sqe, wake_tag);
    wake_read_armed_ = true;
  }

  static void prepare(io_uring_sqe* sqe, io_operation* op) noexcept {
    const std::uint64_t offset = op->offset < 0 ? std::uint64_t(-1) : std::uint64_t(op->offset);
    switch (op->opcode) {
      case io_opcode::read:
        io_uring_prep_read(sqe, op->fd, op->buffer, op->length, offset);
        break;
      case io_opcode::write:
        io_uring_prep_write(sqe, op->fd, op->buffer, op->length, offset);
        break;
      case io_opcode::recv:
        io_uring_prep_recv(sqe, op->fd, op->buffer, op->length, op->flags);
        break;
      case io_opcode::send:
        io_uring_prep_send(sqe, op->fd, op->buffer, op->length, op->flags | MSG_NOSIGNAL);
        break;
      case io_opcode::recvmsg:
        io_uring_prep_recvmsg(sqe, op->fd, op->message, unsigned(op->flags));
        break;
      case io_opcode::sendmsg:
        io_uring_prep_sendmsg(sqe, op->fd, op->message, unsigned(op->flags | MSG_NOSIGNAL));
        break;
      case io_opcode::accept:
        io_uring_prep_accept(sqe, op->fd, op->address, op->address_length,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
        break;
      case io_opcode::connect:
        io_uring_prep_connect(sqe, op->fd, op->address, op->connect_length);
        break;
      case io_opcode::fsync:
        io_uring_prep_fsync(sqe, op->fd, unsigned(op->flags));
        break;
      case io_opcode::poll:
        io_uring_prep_poll_add(sqe, op->fd, unsigned(op->flags));
        break;
      case io_opcode::close:
        io_uring_prep_close(sqe, op->fd);
        break;
    }
  }

  void reap() noexcept {
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0, seen = 0;
    // Completion callbacks may submit more (a task resumed later does, not the callback itself,
    // but a retry hook may): collect first, then advance, then call.
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      const std::uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == wake_tag) {
        wake_read_armed_ = false;
      } else if (tag != ignore_tag) {
        auto* op = reinterpret_cast<io_operation*>(tag);
        op->result = cqe->res;
        in_flight_.remove(op);
        completed_.push_back(op);
      }
    }
    io_uring_cq_advance(&ring_, seen);
    while (io_operation* op = completed_.pop_front()) complete(op, fault_hook_);
  }

  io_uring ring_{};
  unsigned setup_flags_ = 0;
  bool ring_ready_ = false;
  int wake_fd_ = -1;
  std::uint64_t wake_buffer_ = 0;
  bool wake_read_armed_ = false;
  park_state parking_;
  in_flight_list in_flight_;
  operation_fifo completed_;
};

}  // namespace

std::unique_ptr<reactor> make_uring_reactor(int& error) {
  auto result = std::make_unique<uring_reactor>(error);
  if (error != 0) return nullptr;
  return result;
}

}  // namespace spindle::core
