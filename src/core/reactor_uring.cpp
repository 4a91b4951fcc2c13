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
// running executor costs one atomic exchange. wait() never blocks once it has delivered a
// completion (submitting into a full ring reaps, see below): the task that completion woke is on
// this executor's own queue, and nothing else would wake the owner for it.
//
// Full submission queue (I2, never drop): every SQE comes from next_sqe(), and io_uring_get_sqe
// returning null there means the SQ ring is full: we submit what is queued (which empties it)
// and retry. A submission the kernel refuses (-EBUSY: it holds overflowed completions on old
// kernels; -EAGAIN: it could not allocate requests) leaves the entries queued: we reap, then
// retry (submit_queued, the poll() and wait() loops) or leave them for the next poll()/wait(),
// which submits whatever is queued. Reaping inside submit(), cancel() or drain() runs callbacks
// there: drain() walks the in-flight list through `drain_cursor_`, which reap() moves past an
// operation it removes. The calls that take an SQE: submit() (operation_sqe), cancel() and
// drain() (cancel_sqe), wait() arming the wake-up read (wake_sqe); the calls that enter the
// kernel: submit_queued (submit), poll() (submit_and_get_events, get_events), wait()
// (submit_and_wait), drain() (drain_wait). Each is an io_sq_point where the test hook
// (reactor::set_sq_fault_hook) can say "full" instead.
//
// Entering the kernel only when it has something for us: with DEFER_TASKRUN, completions wait
// as task work until the owner enters io_uring_enter. IORING_SETUP_TASKRUN_FLAG makes the kernel
// raise IORING_SQ_TASKRUN in the SQ ring's flags when it queues such work, so poll() enters only
// when it has SQEs to submit or the flag (or overflow) is up: an executor polling between
// runnables costs no system call while nothing happened. completions_pending() reads the same
// flags for an executor deciding whether to keep spinning.
//
// Completion queue overflow: we require IORING_FEAT_NODROP (else the set-up fails and
// make_reactor falls back to epoll): completions the CQ ring has no room for wait in the kernel's
// overflow list, flagged by IORING_SQ_CQ_OVERFLOW, until an io_uring_enter with GETEVENTS moves
// them onto the ring. wait() and drain() always enter that way; poll() does too with
// DEFER_TASKRUN, but moves at most a ring's worth per call and, without DEFER_TASKRUN, does not
// enter at all: so poll() ends by moving and reaping until the flag clears (flush_overflow), and
// a busy executor that never parks still sees every completion. (A completion the kernel could
// not even queue, under memory pressure, is lost: Linux reports it once with -EBADR from
// io_uring_enter; nothing can recover its operation.)
#include <liburing.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
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

class uring_reactor final : public reactor {
 public:
  uring_reactor(const reactor_options& options, int& error) {
    // Newest set-up first (Linux 6.1 has all of these): one issuer, task work deferred to our
    // own io_uring_enter calls (completions are processed when we ask, not at arbitrary system
    // call exits where they contend for socket locks), created disabled so the worker thread,
    // not the thread building the executor, becomes the issuer (attach_owner).
    // TASKRUN_FLAG makes the kernel flag pending task work in the SQ ring's flags, so poll() and
    // completions_pending() can tell without a system call whether entering would bring anything.
    constexpr unsigned preferred = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                                   IORING_SETUP_R_DISABLED | IORING_SETUP_TASKRUN_FLAG;
    constexpr unsigned cooperative = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
    const unsigned cq_size = options.uring_cq_entries != 0 ? unsigned(IORING_SETUP_CQSIZE) : 0u;
    unsigned features = 0;
    error = EINVAL;
    for (const unsigned flags : {preferred, cooperative, 0u}) {
      if (!options.uring_defer_taskrun && (flags & IORING_SETUP_DEFER_TASKRUN) != 0) continue;
      io_uring_params params{};
      params.flags = flags | cq_size;
      params.cq_entries = options.uring_cq_entries;
      error = -io_uring_queue_init_params(options.uring_sq_entries, &ring_, &params);
      if (error == 0) {
        setup_flags_ = flags;
        features = params.features;
        break;
      }
      if (error != EINVAL) return;  // ENOSYS, EPERM, ENOMEM: no io_uring at all
    }
    if (error != 0) return;
    ring_ready_ = true;
    // Without NODROP an overflowing completion queue loses completions (Linux < 5.5).
    if ((features & IORING_FEAT_NODROP) == 0) {
      error = EOPNOTSUPP;
      return;
    }
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
    trace_event(trace_kind::io_submit, std::uint64_t(operation->fd), trace_ref(operation),
                std::uint32_t(operation->opcode));
    io_uring_sqe* sqe = next_sqe(io_sq_point::operation_sqe);
    prepare(sqe, operation);
    io_uring_sqe_set_data64(sqe, reinterpret_cast<std::uintptr_t>(operation));
    in_flight_.insert(operation);
    count_submitted();
  }

  void cancel(std::uintptr_t operation_id) noexcept override {
    io_uring_sqe* sqe = next_sqe(io_sq_point::cancel_sqe);
    io_uring_prep_cancel64(sqe, operation_id, 0);
    io_uring_sqe_set_data64(sqe, ignore_tag);
  }

  void poll() noexcept override {
    if ((setup_flags_ & IORING_SETUP_DEFER_TASKRUN) != 0 && !in_flight_.empty() &&
        (io_uring_sq_ready(&ring_) != 0 || task_work_may_be_pending())) {
      // Deferred task work runs only inside io_uring_enter: submit and collect in one call.
      int rc;
      do {
        rc = enter(io_sq_point::submit_and_get_events,
                   [this] { return io_uring_submit_and_get_events(&ring_); });
        if (rc == -EBUSY) reap();
      } while (rc == -EBUSY || rc == -EINTR);
      // -EAGAIN: what is queued stays queued for the next poll()/wait().
    } else if (io_uring_sq_ready(&ring_) != 0) {
      submit_queued();
    }
    reap();
    flush_overflow();
  }

  std::size_t in_flight() const noexcept override { return in_flight_.size(); }

  bool completions_pending() const noexcept override {
    // Nothing in flight: nothing to deliver, whatever the flags say (a flag raised by the wake-up
    // read's or a cancel request's task work stays up until poll() next enters).
    if (in_flight_.empty()) return false;
    return io_uring_cq_ready(&ring_) != 0 || io_uring_cq_has_overflow(&ring_) ||
           ((setup_flags_ & IORING_SETUP_TASKRUN_FLAG) != 0 && task_work_flagged());
  }

  void drain() noexcept override {
    // cancel() may reap (a full SQ the kernel refused), running callbacks and removing
    // operations from the list, the next one included: walk through drain_cursor_ (see reap()).
    drain_cursor_ = in_flight_.first();
    while (io_operation* op = drain_cursor_) {
      drain_cursor_ = op->next_in_flight;
      cancel(reinterpret_cast<std::uintptr_t>(op));
    }
    if (wake_read_armed_) cancel(wake_tag);
    while (!in_flight_.empty() || wake_read_armed_) {
      __kernel_timespec ten_ms{0, 10'000'000};
      io_uring_cqe* cqe = nullptr;
      const int rc = enter(io_sq_point::drain_wait, [&] {
        return io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, &ten_ms, nullptr);
      });
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
    // Submitting may reap (a full ring): a completion delivered here woke a task onto this
    // executor's queue, so from then on this wait must not block (see the design comment).
    const std::uint64_t delivered_before = delivered_;
    if (io_uring_sq_ready(&ring_) != 0) submit_queued();
    if (in_flight_.empty()) {
      if (delivered_ == delivered_before && parking_.begin_park(park_state::parked_futex)) {
        parking_.wait_on_futex(timeout);
        parking_.end_park();
      }
      reap();
      return;
    }
    if (!wake_read_armed_) arm_wake_read();
    if (delivered_ == delivered_before && parking_.begin_park(park_state::parked_kernel)) {
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
        rc = enter(io_sq_point::submit_and_wait, [&] {
          return io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, relative_pointer, nullptr);
        });
        if (rc == -EBUSY) reap();  // overflowed completions first
      } while ((rc == -EBUSY || rc == -EINTR) && delivered_ == delivered_before);
      // -EAGAIN: nothing was submitted; return, the executor's next wait() tries again.
      parking_.end_park();
    }
    reap();
  }

  void unpark() noexcept override { parking_.unpark(wake_fd_); }

 private:
  // Non-zero if the test hook says the queue is full at `point` (sq_fault_hook_ is null unless a
  // test set it: one predictable branch).
  int injected(io_sq_point point) const noexcept {
    if (sq_fault_hook_ == nullptr) [[likely]] return 0;
    return sq_fault_hook_(point);
  }

  // `call` (a system call of liburing's, returning >= 0 or -errno), unless the hook fakes a
  // refusal at `point`.
  template <class Call>
  int enter(io_sq_point point, Call call) noexcept {
    if (const int fake = injected(point); fake != 0) return fake;
    return call();
  }

  io_uring_sqe* next_sqe(io_sq_point point) noexcept {
    for (;;) {
      if (injected(point) == 0) {
        if (io_uring_sqe* sqe = io_uring_get_sqe(&ring_)) return sqe;
      }
      submit_queued();  // the SQ ring is full: hand it to the kernel, then there is room
    }
  }

  void submit_queued() noexcept {
    for (;;) {
      const int rc = enter(io_sq_point::submit, [this] { return io_uring_submit(&ring_); });
      if (rc >= 0 || (rc != -EBUSY && rc != -EAGAIN && rc != -EINTR)) return;
      reap();  // -EBUSY/-EAGAIN: completions must be reaped before the kernel takes more
    }
  }

  // Moves completions held in the kernel's overflow list onto the CQ ring and reaps them, until
  // none is left or nothing moves (the design comment: poll() alone must see every completion).
  void flush_overflow() noexcept {
    while (io_uring_cq_has_overflow(&ring_)) {
      const int rc = enter(io_sq_point::get_events, [this] { return io_uring_get_events(&ring_); });
      if (rc < 0 && rc != -EBUSY && rc != -EAGAIN && rc != -EINTR) return;  // e.g. -EEXIST
      if (reap() == 0 && rc >= 0) return;  // the flag is set but nothing came: don't spin
    }
  }

  // IORING_SQ_TASKRUN, a hint: the kernel queued task work for us (completions it will post when
  // we enter). With DEFER_TASKRUN it raises the flag when it adds work to an empty list, clears it
  // when we run the work, and raises it again if it left some for the next call; it may also be
  // left up after we ran the work, which costs one needless enter. With COOP_TASKRUN the work
  // also runs at our next return to user space, so poll() does not enter for it. A relaxed read
  // (liburing's READ_ONCE) is enough: a flag set just after we looked is seen by the next
  // poll(), and wait() always enters the kernel before blocking.
  bool task_work_flagged() const noexcept {
    return (IO_URING_READ_ONCE(*ring_.sq.kflags) & IORING_SQ_TASKRUN) != 0;
  }
  // Whether poll() must enter the kernel to find completions: without TASKRUN_FLAG we cannot
  // tell, so always.
  bool task_work_may_be_pending() const noexcept {
    return (setup_flags_ & IORING_SETUP_TASKRUN_FLAG) == 0 || task_work_flagged();
  }

  void arm_wake_read() noexcept {
    io_uring_sqe* sqe = next_sqe(io_sq_point::wake_sqe);
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
      case io_opcode::statx:
        io_uring_prep_statx(sqe, op->fd, op->path, op->flags, op->length,
                            static_cast<struct statx*>(op->buffer));
        break;
      case io_opcode::writev:
        io_uring_prep_writev(sqe, op->fd, static_cast<const iovec*>(op->buffer), op->length,
                             offset);
        break;
    }
  }

  // Collects what the CQ ring holds, then runs the callbacks; returns the CQEs seen. May be
  // re-entered from a callback that submits into a full ring: each operation is delivered once,
  // by whichever call pops it from `completed_`.
  unsigned reap() noexcept {
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
        if (op == drain_cursor_) drain_cursor_ = op->next_in_flight;
        in_flight_.remove(op);
        count_completed();
        completed_.push_back(op);
      }
    }
    io_uring_cq_advance(&ring_, seen);
    while (io_operation* op = completed_.pop_front()) {
      ++delivered_;
      complete(op, fault_hook_);
    }
    return seen;
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
  std::uint64_t delivered_ = 0;              // completions delivered so far (wait())
  io_operation* drain_cursor_ = nullptr;     // drain()'s next operation to cancel
};

}  // namespace

std::unique_ptr<reactor> make_uring_reactor(const reactor_options& options, int& error) {
  auto result = std::make_unique<uring_reactor>(options, error);
  if (error != 0) return nullptr;
  return result;
}

}  // namespace spindle::core
