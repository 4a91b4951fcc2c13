// The submission state machine (invariants U1-U4 in spindle/dispatch/submission.hpp).
#include "spindle/dispatch/submission.hpp"

#include "dispatcher_shared.hpp"

namespace spindle::detail {

void release_submission(submission_base* submission) noexcept {
  // acq_rel: the last release sees every write of the other holders before it deletes.
  if (submission->references_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    submission->destroy_(submission);
  }
}

void submission_base::wait() noexcept {
  std::uint32_t seen = state_.announce_waiter();
  while ((seen & submission_state<>::phase_mask) != submission_state<>::complete) {
    state_.word().wait(seen, std::memory_order_acquire);  // acquire: U1
    seen = state_.load_acquire();
  }
}

bool submission_base::finish(outcome result) noexcept {
  bool notify = false;
  if (!state_.try_complete(result, notify)) return false;
  // Before on_finished: a close() that waits for this completion returns after the report.
  if (result == outcome::exception) note_unobserved(ended_with_exception);
  owner_->on_finished(this);
  if (notify) state_.word().notify_all();
  return true;
}

void submission_base::future_dropped() noexcept { note_unobserved(future_gone); }

void submission_base::note_unobserved(std::uint8_t side) noexcept {
  // acq_rel: the completer's release publishes `exception_` (written before its CAS, U1) to a
  // future side that comes second (acquire); the RMW orders the two bits, so exactly one of
  // the two sides sees the other's.
  const std::uint8_t before = observation_.fetch_or(side, std::memory_order_acq_rel);
  if ((before & (ended_with_exception | future_gone)) != 0 && (before & side) == 0) {
    owner_->report_unobserved(exception_);
  }
}

bool submission_base::cancel() noexcept {
  bool notify = false;
  switch (state_.try_cancel(notify)) {
    case submission_state<>::cancel_result::already_final:
      return false;
    case submission_state<>::cancel_result::completed_in_queue:
      // Removed from the queue in effect: whoever takes it finds it complete and drops it.
      // Its body goes now, before the submitter wakes, as when it runs (nobody else touches
      // the body of a submission that never started).
      drop_body_(this);
      owner_->on_finished(this);
      if (notify) state_.word().notify_all();
      return true;
    case submission_state<>::cancel_result::left_to_starter:
      return true;  // the worker cancels it when it publishes (U2)
    case submission_state<>::cancel_result::cancel_running:
      return owner_->on_cancel_running(this);
  }
  return false;
}

}  // namespace spindle::detail
