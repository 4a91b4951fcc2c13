// A program to look at with the live view (docs/design/diagnostics.md, "Live view (G5)"):
// named tasks passing orders over channels, one of them waiting on a channel that stays quiet,
// a little CPU work so the executors' load moves, until stdin closes (or Enter is pressed).
//
//   SPINDLE_DIAGNOSTICS=127.0.0.1:9100 build/release/examples/spindle-example-live_view
//   then open http://127.0.0.1:9100/ (or run spindle-top 127.0.0.1:9100)
#include <cstdio>

#include "spindle/spindle.hpp"

using namespace std::chrono_literals;

namespace {

// Busy for about `work` of CPU time, then yields: a steady, visible load.
void spin_for(std::chrono::microseconds work) {
  const auto until = std::chrono::steady_clock::now() + work;
  while (std::chrono::steady_clock::now() < until) {
  }
}

spindle::task<void> order_source(spindle::channel<int>& orders) {
  try {
    for (int order = 1;; ++order) {
      co_await orders.send(order);
      co_await spindle::sleep_for(20ms);
    }
  } catch (const spindle::channel_closed&) {
    // main closed the channel: the program ends
  }
}

spindle::task<void> order_packer(spindle::channel<int>& orders, spindle::channel<int>& packed) {
  while (auto order = co_await orders.receive()) {
    spin_for(2ms);
    co_await packed.send(*order);
  }
}

spindle::task<void> order_shipper(spindle::channel<int>& packed) {
  long shipped = 0;
  // The declaration form: g++ 12 miscompiles `while (co_await ch.receive())` (a bare co_await
  // as the loop's condition).
  while (auto order = co_await packed.receive()) ++shipped;
  std::printf("orders shipped: %ld\n", shipped);
}

// Waits on a channel nobody sends on: the live view shows it waiting.
spindle::task<void> refund_desk(spindle::channel<int>& refunds) {
  while (auto refund = co_await refunds.receive()) {
    std::printf("refund %d\n", *refund);
  }
}

spindle::task<void> shop(spindle::channel<int>& orders, spindle::channel<int>& refunds) {
  spindle::channel<int> packed(16);
  auto source = spindle::spawn_named("order-source", order_source(orders));
  auto packer = spindle::spawn_named("order-packer", order_packer(orders, packed));
  auto shipper = spindle::spawn_named("order-shipper", order_shipper(packed));
  auto desk = spindle::spawn_named("refund-desk", refund_desk(refunds));
  co_await std::move(source);
  co_await std::move(packer);
  packed.close();
  co_await std::move(shipper);
  co_await std::move(desk);
}

}  // namespace

int main() {
  spindle::runtime runtime({.workers = 2});
  spindle::channel<int> orders(16);
  spindle::channel<int> refunds(1);
  auto running = runtime.spawn(shop(orders, refunds));
  std::printf("running; press Enter (or close stdin) to stop\n");
  std::fflush(stdout);
  (void)std::getchar();  // a line, or the end of stdin
  orders.close();
  refunds.close();
  running.join();
  std::printf("ok\n");
  return 0;
}
