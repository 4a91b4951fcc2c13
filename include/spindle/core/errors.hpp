// Errors every module shares. Each says what the caller did wrong or what state the runtime is
// in; none is used for control flow inside the runtime except `task_cancelled` (task module).
//
// The vocabulary (docs/design/errors.md has the survey and the reasons), applied by every
// public header and stated again at each function:
//   - End of a stream is not an error: a receive-like call on something that ended returns an
//     empty result (channel receive/try_receive: nullopt; a socket read: 0 bytes).
//   - A value that can no longer be delivered is an error: sending into a closed channel, or
//     receiving from a oneshot whose sender went away without sending, throws channel_closed
//     (a promise broken, like std::future's broken_promise and Tokio's RecvError). A submit to
//     a closed dispatcher throws dispatcher_closed, an ask to a halted actor actor_unavailable.
//   - A try_ call never throws for the state it finds: "it would have to wait" (full, empty,
//     taken) and "it is closed" are results, told apart (channel::try_send ->
//     channel_send_status, actor_ref::send -> send_result), and contextually true on success.
//   - Misuse (a broken precondition the caller could have checked: an empty handle, a second
//     await, an absurd count, a malformed address, a blocking call on a worker) throws
//     usage_error, in every module, before anything happened.
//   - The runtime shutting down: operations that need it to accept new work throw
//     runtime_stopped; what was already accepted and is abandoned ends cancelled
//     (task_cancelled, task/cancellation.hpp).
//   - The operating system refusing: std::system_error with the errno (io, net).
//   - An exception nobody can observe any more (a dispatcher submission whose future was
//     dropped) is handed to a hook (dispatcher_options::on_unobserved_exception), by default
//     log_unobserved_exception: never lost silently.
// Standard bases, so generic handlers keep working: usage_error is a std::invalid_argument (a
// std::logic_error), the state errors are std::runtime_errors.
#pragma once

#include <exception>
#include <stdexcept>

namespace spindle {

// The caller broke an API contract: awaiting a join handle twice, joining a detached task,
// an absurd worker or executor count (0 workers means "one per hardware thread"), blocking on
// a runtime from one of its own workers, a malformed network address, and so on. A
// std::invalid_argument, so code written against the standard type still catches it.
class usage_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The runtime is shutting down (or has shut down) and accepts no new work.
class runtime_stopped : public std::runtime_error {
 public:
  runtime_stopped() : std::runtime_error("spindle: the runtime is shutting down") {}
};

// A value can no longer be delivered: sending on a closed channel, or receiving from a oneshot
// whose sender was destroyed without sending (or an ask whose actor dropped the reply).
class channel_closed : public std::runtime_error {
 public:
  channel_closed() : std::runtime_error("spindle: channel closed") {}
  using std::runtime_error::runtime_error;
};

// The default place for an exception nobody can observe any more: writes one line to stderr,
// "spindle: unobserved exception in <where>: <what()>" (or the type's absence of a what()).
// Safe to call from any thread; never throws.
void log_unobserved_exception(const char* where, std::exception_ptr error) noexcept;

}  // namespace spindle
