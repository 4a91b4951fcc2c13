// A dynamic supervisor: one child per connection, started and terminated while it runs.
// A crashing connection is restarted after a back-off; a terminated one is gone for good.
#include <spindle/spindle.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

struct connection {
  using message_type = int;
  connection(int port, std::atomic<int>& starts) : port(port) { ++starts; }
  void receive(int command) {
    if (command < 0) throw std::runtime_error("connection lost");
  }
  int port;
};

int main() {
  spindle::runtime rt;
  std::atomic<int> starts{0};

  spindle::dynamic_supervisor_spec spec;
  spec.limit = spindle::restart_limit::at_most(5, std::chrono::seconds(10));
  spec.backoff = {std::chrono::milliseconds(10), 2.0, std::chrono::seconds(1),
                  std::chrono::seconds(30)};  // 10 ms, 20 ms, 40 ms ... at most 1 s
  spec.max_children = 100;
  spindle::dynamic_supervisor pool = spindle::spawn_dynamic_supervisor(rt, spec);

  // One template, started with a port each time (OTP's simple_one_for_one).
  spindle::dynamic_child_template<int> conn;
  conn.name = "connection";
  conn.restart = spindle::restart_type::on_crash_only;  // transient
  conn.stop_timeout = std::chrono::milliseconds(100);   // then killed
  conn.start = [&rt, &starts](const spindle::spawn_options& options, const int& port) {
    return spindle::actor_handle(spindle::spawn_actor<connection>(rt, options, port, starts));
  };

  // From a plain thread: blocking_receive(); in a task: co_await.
  spindle::started_child a = pool.start_child(conn, 8080).blocking_receive();
  spindle::started_child b = pool.start_child(conn, 8081).blocking_receive();
  if (a.error != spindle::start_child_error::none) return 1;
  if (b.error != spindle::start_child_error::none) return 1;

  a.actor.as<int>().send(-1);  // crashes: restarted after 10 ms, same id, a new actor
  while (starts.load() < 3) std::this_thread::yield();

  // Each child with its current actor (empty while backing off) and restart count.
  int restarted = 0;
  for (const spindle::dynamic_child_info& c : pool.which_children().blocking_receive()) {
    if (c.id == a.id && c.restarts == 1) ++restarted;
  }

  spindle::terminate_result ended = pool.terminate_child(b.id).blocking_receive();
  spindle::dynamic_supervisor_stats stats = pool.stats().blocking_receive();

  auto down = spindle::monitor_actor(pool.ref());
  pool.ref().stop();  // stops every child at once, each within its stop_timeout
  down.blocking_receive();
  return restarted == 1 && ended == spindle::terminate_result::stopped && stats.restarts == 1 &&
                 stats.listed == 1 && stats.terminated == 1
             ? 0
             : 1;
}
