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
  owner_->on_finished(this);
  if (notify) state_.word().notify_all();
  return true;
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
