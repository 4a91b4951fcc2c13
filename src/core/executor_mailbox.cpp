// Inter-executor messaging: send, delivery, the return to the sender, reclamation and the
// shutdown discard. The design (participants, states of a message, the parking handshake) is in
// include/spindle/core/executor_mailbox.hpp and docs/design/messaging.md.
#include "spindle/core/executor_mailbox.hpp"

#include <cassert>

#include "spindle/core/executor.hpp"
#include "spindle/core/runtime_core.hpp"

namespace spindle::core {

void executor::send_message(runtime_core& core, std::uint32_t target,
                            void (*deliver)(executor_message&, executor*) noexcept, void* a,
                            void* b, void* c, std::uint32_t kind) {
  assert(deliver != nullptr && "spindle: send_message needs a deliver function");
  assert(target < core.executor_count() && "spindle: send_message to no such executor");
  executor* self = current();
  // From a worker of this runtime: the current executor's pool (owner-only, no synchronisation).
  executor* const owner = self != nullptr && &self->core_ == &core ? self : nullptr;
  executor_message* message;
  if (owner != nullptr) {
    bool grew = false;
    message = owner->message_pool_.acquire(grew);  // allocation failure terminates (noexcept)
    if (grew) add_single_writer(owner->message_stats_.pool_chunks);
    add_single_writer(owner->message_stats_.sent);
    message->sender = owner->index_;
  } else {
    message = new executor_message;
    message->sender = executor_message::foreign_sender;
  }
  message->deliver = deliver;
  message->kind = kind;
  message->payload[0] = a;
  message->payload[1] = b;
  message->payload[2] = c;

  executor& receiver = core.executor_at(target);
  switch (receiver.mailbox_.post(message)) {
    case executor_mailbox::post_result::queued:
      return;
    case executor_mailbox::post_result::queued_receiver_parking:
      // The receiver announced it is parking: wake it as schedule_on wakes an inbox's owner (the
      // mailbox is not stealable, so nobody else would run its messages). The post's seq_cst
      // CAS and flag load stand in for schedule_on's fence (executor_mailbox.hpp).
      if (core.cancel_park(target)) receiver.parker().unpark();
      return;
    case executor_mailbox::post_result::closed:
      // Shutdown step 5 closed the mailboxes: nobody will poll this one again. Discard here, on
      // the calling thread. (Workers have left their loops before the close, so the message is
      // foreign in practice; a pool message goes back to the pool of the calling executor.)
      deliver(*message, nullptr);
      if (owner != nullptr) {
        owner->reclaim(message);
      } else {
        delete message;
      }
      return;
  }
}

void executor::reclaim(executor_message* message) noexcept {
  message_pool_.release(message);
  add_single_writer(message_stats_.reclaimed);
}

void executor::poll_mailbox() noexcept {
  executor_message* message = mailbox_.take_all();
  std::uint64_t delivered = 0;
  std::uint64_t foreign_delivered = 0;
  std::uint64_t returned = 0;
  while (message != nullptr) {
    executor_message* const next = message->next;  // the message changes hands below
    if (message->deliver == nullptr) {
      // One of ours, back from the executor that delivered it.
      ++returned;
      message_pool_.release(message);
    } else {
      message->deliver(*message, this);
      ++delivered;
      if (message->sender == executor_message::foreign_sender) {
        ++foreign_delivered;
        delete message;
      } else {
        finish_delivery(message);
      }
    }
    message = next;
  }
  // The counters once per batch: each is written by this thread only.
  if (delivered != 0) {
    add_single_writer(message_stats_.delivered, delivered);
    if (foreign_delivered != 0) add_single_writer(message_stats_.foreign_delivered, foreign_delivered);
  }
  if (returned != 0) {
    add_single_writer(message_stats_.returned_received, returned);
    add_single_writer(message_stats_.reclaimed, returned);
  }
}

void executor::finish_delivery(executor_message* message) noexcept {
  const std::uint32_t sender = message->sender;
  if (sender == index_) {
    reclaim(message);  // a send to self: we are the pool's owner, no need to go round the mailbox
    return;
  }
  message->deliver = nullptr;  // marks it a return
  // The sender's mailbox is closed only after every worker (this one too) has left its loop.
  [[maybe_unused]] const bool posted = core_.executor_at(sender).mailbox_.post_return(message);
  assert(posted && "spindle: a mailbox closed while its runtime's workers still deliver");
}

void executor::discard_mailbox() noexcept {
  // Shutdown step 5 (runtime_core.hpp): no worker runs any more, so this thread is the single
  // writer of every executor's pool and counters from here on.
  executor_message* message = mailbox_.close();
  while (message != nullptr) {
    executor_message* const next = message->next;
    if (message->deliver == nullptr) {
      add_single_writer(message_stats_.returned_received);
      reclaim(message);
    } else {
      message->deliver(*message, nullptr);
      add_single_writer(message_stats_.delivered);
      if (message->sender == executor_message::foreign_sender) {
        add_single_writer(message_stats_.foreign_delivered);
        delete message;
      } else {
        core_.executor_at(message->sender).reclaim(message);
      }
    }
    message = next;
  }
}

}  // namespace spindle::core
