// Typed call/cast: request/response whose reply type is checked against the request at compile
// time, so a call needs no hand-written reply message (docs/design/actors.md, "Typed calls").
//
//   struct get_total { using reply = int; };                 // the request names its reply type
//   struct counter {
//     using message_type = std::variant<add, spindle::call_message<get_total>>;
//     void receive(message_type& m, spindle::actor_context<message_type>&) {
//       if (auto* call = std::get_if<spindle::call_message<get_total>>(&m)) {
//         call->reply_with([&](const get_total&) { return total; });  // must yield an int
//       } ...
//     }
//   };
//   get_total question;
//   int n = co_await ref.call(question);                                 // int, checked
//   int m = co_await ref.call(question, {.timeout = 100ms});              // or timeout_error
//   ref.cast(add{1});                                                    // one-way
//
// Who takes part: the caller (any thread), which makes a oneshot, queues a call_message<Req>
// holding the request and the oneshot's sender (a reply_to<Req::reply>), and keeps the receiver;
// the actor, which answers through the call_message once (reply, or reply_with a function of
// the request whose result must convert to the reply type: a static_assert otherwise); the
// oneshot carries the answer back (sync/oneshot.hpp; the actor's thread never blocks on it).
//
// What call returns: the oneshot_receiver<R> itself (no coroutine frame, no task): co_await it
// in a task, or blocking_receive() on a plain thread. The message is queued by call(), not by
// the await (unlike ask(), a lazy task). With call_options: the same receiver inside a
// timeout_awaiter (time/timeout.hpp, "Over any other awaitable"): the calling task itself waits,
// in a cancellation scope whose timer fires at the deadline; no child task. Past the deadline
// the await throws timeout_error; the actor may still answer later, into a receiver that is
// gone (the answer is dropped). Costs: one oneshot state and one envelope per call (ask adds a
// task frame); with a deadline, one small allocation and one timer arm/disarm if it waits.
//
// Errors: actor_unavailable from call() if the message could not be queued (halted, or a full
// bounded mailbox); channel_closed from the await if the actor dropped the call_message without
// answering (it halted, or ignored it); timeout_error past the deadline; usage_error on an empty
// reference, or a timeout awaited outside a task.
#pragma once

#include <concepts>
#include <optional>
#include <type_traits>
#include <utility>

#include "spindle/actor/actor.hpp"
#include "spindle/core/clock.hpp"
#include "spindle/sync/oneshot.hpp"
#include "spindle/time/timeout.hpp"

namespace spindle {

// A request for call(): names the type of its reply.
template <class Req>
concept call_request = requires { typename Req::reply; } && !std::is_void_v<typename Req::reply>;

// What the actor receives for a call: the request, and the way to answer it (once).
template <class Req>
struct call_message {
  static_assert(call_request<Req>, "a call's request type must declare `using reply = R;`");
  using request_type = Req;
  using reply_type = typename Req::reply;

  Req request;
  reply_to<reply_type> reply;

  // Answers with f(request); f's result must convert to the request's reply type.
  template <class F>
  void reply_with(F&& f) {
    using result = std::invoke_result_t<F&&, Req&>;
    static_assert(std::convertible_to<result, reply_type>,
                  "call_message::reply_with: the handler's result is not the request's reply type");
    reply(reply_type(std::forward<F>(f)(request)));
  }
};

// Either a deadline (wins when set) or a timeout counted from when the call is awaited.
struct call_options {
  std::optional<clock_time> deadline{};
  clock_duration timeout = clock_duration::max();
};

namespace actor_detail {

template <class M, class Req>
oneshot_receiver<typename Req::reply> queue_call(const actor_ref<M>& ref, Req&& request) {
  static_assert(call_request<Req>, "call(): the request type must declare `using reply = R;`");
  static_assert(std::constructible_from<M, call_message<Req>>,
                "call(): this actor's message type does not accept call_message<Request>");
  using R = typename Req::reply;
  if (!ref) throw usage_error("spindle: call on an empty actor reference");
  auto [sender, receiver] = oneshot<R>();
  const send_result sent =
      ref.send(M(call_message<Req>{std::move(request), reply_to<R>(std::move(sender))}));
  if (sent != send_result::queued) throw actor_unavailable(sent);
  receiver.describe_wait_as({wait_kind::ask, ref.id()});  // "ask actor#N" in snapshots
  return std::move(receiver);
}

}  // namespace actor_detail

template <class M>
template <class Req>
auto actor_ref<M>::call(Req request) const {
  return actor_detail::queue_call(*this, std::move(request));
}

template <class M>
template <class Req>
auto actor_ref<M>::call(Req request, const call_options& options) const {
  using receiver_type = oneshot_receiver<typename Req::reply>;
  return timeout_awaiter<receiver_type>(options.deadline, options.timeout,
                                        actor_detail::queue_call(*this, std::move(request)));
}

}  // namespace spindle
