// Fork-join machinery shared by fork_join and the loop algorithms: latent frames, the per-thread
// fork state, heartbeats, promotion, merging. The design (seed 001, docs/design/fork-join.md):
//
// Who takes part:
//   - the *owner*: a worker thread running a fork-join computation on its own native stack;
//   - *thieves*: other workers that take a promoted continuation from the owner's offer board
//     (core/offer_board.hpp) and run it as its *delegate*.
//
// A fork records its right continuation as a *latent frame* on the owner's stack (the C++
// stack frame of the fork_join call) and pushes a pointer to it on the thread's frame stack
// (`fork_thread_state::frames`, a bounded array). Then it runs the left branch inline, pops the
// pointer and, if the frame is still latent, runs the right branch inline too: a fork nobody took
// costs a few stores and no atomic operation.
//
// Heartbeat: every fork (and every loop block) counts down `countdown`; at zero the owner reads
// the clock (the countdown is calibrated so that happens about four times per quantum) and, once
// per quantum, *promotes*: it scans the frame stack from the bottom (the most basal frame) for a
// latent frame that existed for the whole previous quantum (its epoch is at least two heartbeats
// old), turns its right continuation into a `delegated_work` and publishes it on the executor's
// offer board; a second one only if an executor is parked (the seed's "at most two per theft").
// Then it wakes an idle executor, preferring the least utilised of two random ones. A loop that
// starts a computation (pushed on an empty frame stack) starts with the countdown and its
// interval at 1: what the previous computation taught about the cost of a tick says nothing about
// the cost of its elements, and its first block is as long as the countdown. A fork_join that
// starts one keeps the countdown (tiny computations started back to back would otherwise read the
// clock each time): if its ticks are long, the ping that comes after two quanta without a check
// sets the countdown to 1, and that check shrinks the interval in one step, in proportion to how
// late it came. The heartbeat is also the executor's service point (executor::service_point):
// due timers fire and I/O completions are delivered about once per service interval however long
// the computation runs.
//
// Pings: heartbeats without fork points. The owner may run a long leaf (a loop element, a branch
// that does not fork) or unwind after its last fork, and count nothing. At each clock check the
// owner requests a ping for two quanta later; the runtime monitor then interrupts it with a
// signal (executor.hpp, "pings"), also when a runnable has run for half a service interval
// without any request (a computation whose first act is a long leaf), and `on_ping` runs the same
// promotion in signal context, on the owner's thread, between any two of its instructions. A ping
// that finds no frame declines further unrequested pings for the running runnable and sets the
// countdown to 1, so that if the runnable forks later, its first fork checks the clock and
// requests a ping (without that, a long leaf forked after such a ping went unoffered). What
// it touches is therefore shared with the interrupted owner as with another thread, except that
// ordering needs only compiler fences (std::atomic_signal_fence):
//   - `top`, the frames' `published`, the loop frames' `next`/`end`, `epoch`,
//     `next_heartbeat_ns` and `countdown` are lock-free atomics accessed relaxed (plain loads
//     and stores on every target, signal-safe);
//   - a push writes the frame and its slot, then (release signal fence) the new `top`; a pop
//     writes `top`, then (seq_cst signal fence) reads `published`: a ping before the pop finished
//     its promotion before the owner resumed, a ping after it cannot see the frame;
//   - where the owner changes what a ping would read in several steps (its own heartbeat,
//     claiming a loop block, publishing on the board) it sets `masked`; a ping that finds it set
//     does nothing and leaves the request in place, so the monitor pings again a tick later;
//   - the handler publishes on the board (atomic stores), bumps counters (lock-free RMWs),
//     requests the next ping, reads the clock (clock_gettime): nothing that locks or allocates.
//     It cannot wake an idle executor; the monitor does, once the ping was taken.
// A promotion gives a loop frame's whole remainder away when only one element is left (the
// owner is busy with the block it claimed, see parallel_loop.hpp). A ping sets the countdown to
// 1 (no check came for two quanta: the countdown is too long), so the next fork or block
// boundary checks the clock; when no latent frame is left the request is withdrawn and further
// pings declined, and that check requests again.
//
// Slices: a delegate running a loop piece from its executor's loop (not nested in a wait) ends
// its slice at a heartbeat once it has run for a service interval and its executor has other
// work waiting (executor::has_waiting_work: woken tasks, tasks stuck behind an executor in a long
// runnable): it takes its remainder back, re-offers it on its own board and returns to the loop,
// which runs the waiting work and then takes the remainder (or an idle executor or the waiting
// owner does). So a computation that occupies every worker still lets the loop run other tasks
// about once per element or per service interval. Right branches of fork_join cannot be cut
// (they are arbitrary callables on the delegate's stack): a task woken while only such branches
// run waits until one ends.
//
// Frame states (field `published`, written by the owner's thread only: its heartbeat or its
// ping handler): latent (null) -> published (the delegated work). Published work is then either
// withdrawn by the owner (board CAS, B1 in offer_board.hpp: the owner runs it inline as if it had
// never been offered) or taken by exactly one thief. A delegate that ends a slice re-offers the
// same work on its own board (one delegate at a time; `unmerged` stays 1 until the last slice).
//
// Merge (invariant M): the delegate writes its result (or exception) into the delegated work,
// then stores `unmerged = 0` with release; the owner reads `unmerged == 0` with acquire before it
// reads the result. After its release store the delegate does not touch the work again (the
// owner may return and pop the stack frame holding it); it wakes the owner through the owner's
// executor parker, whose address it read before the store (the parker lives as long as the
// runtime).
//
// Waiting (F4): an owner whose published work was taken waits for the merge and meanwhile runs
// other published work *of the same computation* (the thief's board first, then its own, then
// everyone's), nested on its stack at most `max_help_depth` deep, so the stack stays bounded;
// with nothing to run it services its executor (service_point), spins briefly, then parks with
// a short timeout.
//
// Computations (issue 14, item 6): a computation is a tree of forks with one root, the
// fork_join (or loop) a task or a plain call started at help depth 0 on a worker. Its token is
// the root thread's state address while the root thread runs its own frames, and every piece
// carries the token of the computation it was promoted from (`delegated_work::computation`,
// also the tag of its board publication); a thread running a piece adopts the piece's token for
// as long as it runs it (delegate_scope). A waiting owner takes only pieces with its own token.
// Why that is enough: helping nests a piece on the waiter's stack, and a piece of an unrelated
// computation could wait there for a lock the waiter holds (deadlock on itself); a piece of the
// same computation is one the waiter's computation would have run itself, serially, on the same
// thread, had nobody stolen anything, so helping with it adds no lock order the serial program
// does not have. Tokens are never confused: a thread runs one root computation at a time (the
// fork_join of a task is synchronous and waiting never runs tasks), and a root returns only
// after every piece of it merged, so no piece of an earlier root computation of the same thread
// can still be on a board when the next one starts.
//
// Bounded memory (F5): latent frames live in the C++ frames of the computation itself; at most
// `frame_capacity` of them per thread are registered (deeper forks run serially), at most the
// board's slot count are published per executor, and help nesting is bounded. A fork_join's
// delegated work lives in the thread's work slot of its frame's stack slot (`work_slot`), so a
// recursion level pays only the frame's few pointers of native stack (fork-join.md, "Depth").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>

#include "spindle/core/executor.hpp"
#include "spindle/core/runnable.hpp"

namespace spindle {

// Process-wide fork-join counters (relaxed, for tests and diagnostics).
struct fork_counters {
  std::uint64_t promoted = 0;   // right continuations published at a heartbeat
  std::uint64_t withdrawn = 0;  // ... of which the owner took back and ran inline
  std::uint64_t delegated = 0;  // ... of which another worker ran (a theft)
  std::uint64_t helped = 0;     // delegated work run by a worker while it waited for a merge
  std::uint64_t heartbeats = 0;
};
fork_counters fork_statistics() noexcept;

namespace fork_detail {

inline constexpr std::uint32_t no_thief = ~std::uint32_t(0);

// A right continuation once it is published: runnable by whoever takes it from the board.
struct delegated_work : core::runnable {
  explicit delegated_work(const core::runnable_vtable* table) noexcept : runnable(table) {}
  // 1 from publication until the delegate merged (invariant M).
  std::atomic<std::uint32_t> unmerged{1};
  // The executor running it: where the waiting owner looks for work first (leapfrogging).
  std::atomic<std::uint32_t> thief{no_thief};
  core::park_driver* owner_parker = nullptr;  // set by the owner before publication
  const void* computation = nullptr;          // its computation's token, set before publication
  std::uint32_t slot = 0;                     // board slot, owner-only
  std::exception_ptr error;                   // written by the delegate before the merge
};

// What the frame stack points at. `promote` turns the frame's right continuation into delegated
// work, or returns null if there is nothing to offer (a loop with no element left). A loop
// constructs the work inside its frame; fork_join, whose frames are one per recursion level and
// so decide how deep a recursion the native stack holds, constructs it in `storage`: the
// thread's work slot of the frame's stack slot (`work_slot`), kept out of the frame so a level
// costs only the frame's few pointers. It may run in signal context (a ping): plain stores only.
struct latent_frame {
  delegated_work* (*promote)(latent_frame*, void* storage) noexcept;
  std::uint64_t epoch;  // the owner's heartbeat epoch when pushed
  // Null while latent. Written by a promotion (the owner's heartbeat or its ping handler), read
  // by the owner: relaxed, see "Pings" above.
  std::atomic<delegated_work*> published{nullptr};
};

struct fork_thread_state {
  // The frame stack: [frames, top) are registered, top == limit means full. All null on a thread
  // that is not a worker (every fork runs serially). Pointers rather than indices: a fork's
  // push and pop are then two stores with nothing to compute.
  std::atomic<latent_frame**> top{nullptr};  // first: its address is the state's own
  latent_frame** frames = nullptr;
  latent_frame** limit = nullptr;
  // One work slot per frame slot (`work_slot`); owner-only pointer, set when attached.
  unsigned char* work_slots = nullptr;
  // Ticks (forks, loop elements) left before the next clock check (a ping may set it to 1).
  std::atomic<std::int64_t> countdown{std::int64_t(1) << 62};
  std::atomic<std::uint64_t> epoch{2};  // epoch 0 frames are eligible at the first heartbeat
  std::atomic<std::uint64_t> next_heartbeat_ns{0};
  // The owner is changing what a ping reads: the ping does nothing (see "Pings").
  std::atomic<bool> masked{false};
  // The token of the computation whose piece this thread runs (see "Computations"); null while
  // it runs its own root computation (the token is then this state's address). Written by the
  // thread around the pieces it runs, read by its promotions (its heartbeat or its ping
  // handler): relaxed, see "Pings".
  std::atomic<const void*> computation{nullptr};
  // Owner-only from here on.
  std::int64_t interval = 1;
  std::uint64_t last_check_ns = 0;  // 0: no check yet in this computation
  std::uint64_t quantum_ns = 0;
  std::uint64_t ping_delay_ns = 0;  // a ping comes this long after the last clock check
  std::uint32_t help_depth = 0;
  std::uint32_t random_state = 1;
  core::executor* executor = nullptr;
  // Slices (see above): set while a delegate runs a loop piece from the executor's loop.
  bool slice_allowed = false;
  bool slice_over = false;  // the piece should end at its next block boundary
  std::uint64_t slice_start_ns = 0;
};

inline constexpr std::uint32_t frame_capacity = 1024;
inline constexpr std::uint32_t max_help_depth = 16;
// Bytes of a work slot: fork_join's delegated work (a few pointers) fits, whatever its types.
inline constexpr std::size_t work_slot_size = 96;
inline constexpr std::size_t work_slot_alignment = alignof(std::max_align_t);

// The calling thread's state; set on a worker's first fork, null until then.
extern thread_local constinit fork_thread_state* current_state;
// Slow path of thread_state(): a worker gets its own state, any other thread the serial one.
fork_thread_state* attach_thread() noexcept;

inline fork_thread_state* thread_state() noexcept {
  fork_thread_state* state = current_state;
  return state != nullptr ? state : attach_thread();
}

// The countdown reached zero: calibrate, and promote if a quantum has passed.
void on_countdown(fork_thread_state* state) noexcept;
// A fork counts one tick (a loop block counts its elements): true when the clock is due.
inline bool count_down(fork_thread_state* state, std::int64_t ticks) noexcept {
  // relaxed: shared only with this thread's ping handler, which may set it to 1 (a store lost
  // to this read-modify-write only delays one clock check).
  const std::int64_t left = state->countdown.load(std::memory_order_relaxed) - ticks;
  state->countdown.store(left, std::memory_order_relaxed);
  return left <= 0;
}

// A loop pushed on an empty frame stack starts a computation: the countdown and its interval
// restart from 1, since its first block is as long as the countdown.
void begin_loop_computation(fork_thread_state* state) noexcept;

// Owner: registers `frame` in `slot` (== top, != limit).
inline void push_frame(fork_thread_state* state, latent_frame** slot, latent_frame* frame) noexcept {
  *slot = frame;
  // release (signal fence): the frame and its slot are written before a ping can see the top.
  std::atomic_signal_fence(std::memory_order_release);
  state->top.store(slot + 1, std::memory_order_relaxed);  // relaxed: see "Pings"
}
// The work slot of the frame registered in `slot`. Promotion constructs the frame's delegated
// work there; it stays in use until the work was withdrawn or merged, and for that long the
// frame stays registered in `slot` (fork_join keeps it there while it waits), so no other frame
// is pushed there and promoted into the same work slot.
inline void* work_slot(fork_thread_state* state, latent_frame** slot) noexcept {
  return state->work_slots + std::size_t(slot - state->frames) * work_slot_size;
}

// Owner: unregisters the frame in `slot` (the top one). Afterwards `published` is final. (A ping
// request outlives the computation: a ping that finds the stack empty withdraws it.)
inline void pop_frame(fork_thread_state* state, latent_frame** slot) noexcept {
  state->top.store(slot, std::memory_order_relaxed);  // relaxed: see "Pings"
  // seq_cst (signal fence): the pop is done before the owner reads the frame's `published`.
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
// Owner: what a promotion published for a popped frame (null: it stayed latent).
inline delegated_work* published_work(const latent_frame& frame) noexcept {
  delegated_work* work = frame.published.load(std::memory_order_relaxed);  // relaxed: "Pings"
  // acquire (signal fence): the work's fields, written before `published`, are read after.
  std::atomic_signal_fence(std::memory_order_acquire);
  return work;
}
// Owner: brackets a change a ping must not see half-done.
inline void mask_pings(fork_thread_state* state) noexcept {
  state->masked.store(true, std::memory_order_relaxed);  // relaxed: same thread
  std::atomic_signal_fence(std::memory_order_seq_cst);   // set before the change begins
}
inline void unmask_pings(fork_thread_state* state) noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);   // the change is done before clearing
  state->masked.store(false, std::memory_order_relaxed);  // relaxed: same thread
}

// Slices of a delegate's loop piece (see above). begin_slice: true if this piece may end early
// (called from the executor's loop, not nested in a wait); end_slice clears the state.
bool begin_slice(fork_thread_state* state) noexcept;
inline void end_slice(fork_thread_state* state) noexcept {
  if (state->slice_allowed) state->executor->set_ends_runnable_when_work_waits(false);
  state->slice_allowed = false;
  state->slice_over = false;
}
// Re-offers the rest of a piece that ended its slice on this executor's board; false if the
// board is full (the caller goes on with it).
bool republish(fork_thread_state* state, delegated_work* work) noexcept;

// Owner: takes published work back; true if no thief took it (the owner runs it itself).
bool withdraw(fork_thread_state* state, delegated_work* work) noexcept;
// Owner: waits until the delegate of `work` merged, running other published work meanwhile.
void wait_for_merge(fork_thread_state* state, delegated_work* work) noexcept;
// Delegate: called when it starts running `work` and when it is done (the merge).
void begin_delegate(delegated_work* work) noexcept;
void finish_delegate(delegated_work* work) noexcept;

// The token of the computation the calling thread works for (see "Computations").
inline const void* computation_token(fork_thread_state* state) noexcept {
  const void* token = state->computation.load(std::memory_order_relaxed);  // relaxed: "Pings"
  return token != nullptr ? token : state;
}
// Delegate: the thread works for `work`'s computation while this lives (the piece's runner),
// then for the one it worked for before (its own, or, nested in a wait, the same one).
class delegate_scope {
 public:
  explicit delegate_scope(delegated_work* work) noexcept
      : state_(thread_state()),
        previous_(state_->computation.load(std::memory_order_relaxed)) {  // relaxed: "Pings"
    state_->computation.store(work->computation, std::memory_order_relaxed);  // relaxed: "Pings"
    begin_delegate(work);
  }
  ~delegate_scope() {
    state_->computation.store(previous_, std::memory_order_relaxed);  // relaxed: "Pings"
  }
  delegate_scope(const delegate_scope&) = delete;
  delegate_scope& operator=(const delegate_scope&) = delete;

 private:
  fork_thread_state* state_;
  const void* previous_;
};
// Owner: the frame in `slot` was popped and its work published; a thief took it. Waits for
// the merge with the frame registered again (see work_slot), then pops it for good.
inline void wait_registered(fork_thread_state* state, latent_frame** slot, latent_frame* frame,
                            delegated_work* work) noexcept {
  push_frame(state, slot, frame);  // published: no promotion looks at it again
  wait_for_merge(state, work);
  pop_frame(state, slot);
}
// Owner: the frame in `slot` is off the stack because its left side threw; settle the published
// work.
inline void settle_after_exception(fork_thread_state* state, latent_frame** slot,
                                   latent_frame& frame) noexcept {
  delegated_work* work = published_work(frame);
  if (work != nullptr && !withdraw(state, work)) wait_registered(state, slot, &frame, work);
}

// Published work is never queued where shutdown drains (only on boards, which owners empty).
void drop_delegated(core::runnable* self) noexcept;

}  // namespace fork_detail
}  // namespace spindle
