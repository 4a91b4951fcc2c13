// Bounded resumption: every coroutine-to-coroutine transfer goes through a per-thread trampoline.
//
// Symmetric transfer (await_suspend returning the next handle) is only stack-safe when the
// compiler turns the resume into a tail call; g++ 12 does not at -O0/-O1 or under sanitizers, so
// a long chain of immediately-completing awaits would grow the stack until it overflows. Instead,
// an await_suspend that wants to continue with coroutine `h` stores it with transfer_to(h) and
// returns void; the frame that is resuming coroutines (run_trampoline, at the bottom of the stack)
// picks `h` up and resumes it. Stack depth stays constant whatever the chain length or nesting.
//
// Invariant: transfer_to is only called from await_suspend of a coroutine resumed (directly or
// by earlier transfers) by run_trampoline on this thread, and at most once per suspension.
#pragma once

#include <coroutine>

namespace spindle::detail {

struct trampoline_state {
  std::coroutine_handle<> next;
};

inline thread_local trampoline_state trampoline;

inline void transfer_to(std::coroutine_handle<> next) noexcept { trampoline.next = next; }

// Resumes `first`, then whatever each resumed coroutine transferred to, until one suspends
// without naming a successor (it waits for an event, or the chain finished).
inline void run_trampoline(std::coroutine_handle<> first) noexcept {
  std::coroutine_handle<> current = first;
  do {
    trampoline.next = nullptr;
    current.resume();
    current = trampoline.next;
  } while (current);
}

}  // namespace spindle::detail
