// Defects found by the attack on the actor features of issue 17 (spawn_registered, timers to
// actors), each shown by the smallest race or scenario that exhibits it.
//   - spawn_registered publishes the actor under its name (prepare) before spawn_prepared lists
//     it in the directory and takes the returned ref's reference: a send to the name in that
//     window can run the actor to its halt first, whose delist finds nothing to remove; the
//     late enlist then lists a halted cell, which stays in the directory after it is freed.
//   - a timer armed from a thread other than its service's owner (send_after from a plain
//     thread) does not wake the owner executor parked on an earlier, longer timeout: the
//     message comes when something else wakes it (the idle trim, about 1 s), or never.
//   - a spawn from a plain thread racing the runtime's shutdown can succeed (it passed the
//     stopping check) after the shutdown halted every actor it knew: the new actor is never
//     halted, its monitor is never told, its cell leaks.
//   - kv_service: a client that sends requests and never reads the replies keeps its session
//     (socket, actor) forever: the session's handler waits in write_all with no deadline, and
//     its idle timeout is a message that waits behind that handler.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kv_service/server.hpp"
#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::runtime;
using spindle::testing::eventually;

struct stops_on_first_message {
  using message_type = int;
  void receive(int, spindle::actor_context<int>& ctx) { ctx.stop(); }
};

bool listed_in_snapshot(runtime& rt, spindle::actor_id id) {
  const std::vector<spindle::actor_info> actors = spindle::actors_of(rt).snapshot();
  return std::any_of(actors.begin(), actors.end(),
                     [id](const spindle::actor_info& a) { return a.id == id; });
}

TEST(ActorAttackA, SpawnRegisteredRacingASendToItsNameLeavesNoHaltedActorListed) {
  runtime rt({.workers = 2});
  std::atomic<bool> done{false};
  std::thread sender([&] {
    while (!done.load(std::memory_order_relaxed)) {
      (void)spindle::send_to<int>(rt, "racer", 1);
    }
  });
  int stale = 0;
  int spawned = 0;
  // Every ref is kept: a listed cell is never freed here (the defect would be a use after free).
  std::vector<spindle::actor_ref<int>> kept;
  for (int round = 0; round < 2000 && stale == 0; ++round) {
    spindle::actor_ref<int> actor;
    try {
      actor = spindle::spawn_registered<stops_on_first_message>(rt, "racer");
    } catch (const spindle::name_in_use&) {
      continue;  // the previous one has not halted yet
    }
    ++spawned;
    auto down = spindle::monitor_actor(actor);
    actor.send(1);  // halts it whoever wins
    const spindle::exit_reason why = spindle::testing::receive_within(std::move(down));
    EXPECT_EQ(why.kind, spindle::exit_kind::normal);
    // Halted and told: its halt has delisted it.
    if (listed_in_snapshot(rt, actor.id())) ++stale;
    kept.push_back(std::move(actor));
  }
  done = true;
  sender.join();
  EXPECT_GT(spawned, 0);
  EXPECT_EQ(stale, 0) << "an actor that had halted was still listed in the actor directory";
  if (stale != 0) std::_Exit(1);  // the directory holds halted cells: shutting down would crash
}

struct stamps {
  using message_type = int;
  std::atomic<int>* handled;
  void receive(int, spindle::actor_context<int>&) { handled->fetch_add(1); }
};

TEST(ActorAttackA, SendAfterFromAPlainThreadFiresOnAParkedRuntime) {
  runtime rt({.workers = 2});
  std::atomic<int> handled{0};
  auto actor = spindle::spawn_actor<stamps>(rt, &handled);
  auto parks_of = [&rt](std::uint32_t e) { return rt.core().executor_at(e).stats().parks.load(); };
  // Both executors parked once: nothing left to do but the timers of the rounds below.
  ASSERT_TRUE(eventually([&] { return parks_of(0) > 0 && parks_of(1) > 0; }, std::chrono::seconds(10)));
  int late_or_lost = 0;
  for (int round = 0; round < 10; ++round) {
    const int before = handled.load();
    const std::uint64_t parks_before = parks_of(0) + parks_of(1);
    const auto armed_at = std::chrono::steady_clock::now();
    auto timer = spindle::send_after(actor, std::chrono::milliseconds(5), round);
    // Generous: due in 5 ms; the defect delivers it after about a second, or never.
    const bool came = eventually([&] { return handled.load() > before; }, std::chrono::seconds(3));
    if (!came || std::chrono::steady_clock::now() - armed_at > std::chrono::milliseconds(500)) {
      ++late_or_lost;
    }
    if (!came) {
      (void)timer.cancel();
      continue;
    }
    // The executor that handled it parks again before the next round arms.
    ASSERT_TRUE(eventually([&] { return parks_of(0) + parks_of(1) > parks_before; },
                           std::chrono::seconds(10)));
  }
  EXPECT_EQ(late_or_lost, 0) << "of 10 send_after(5 ms) armed from a plain thread while the "
                             << "executors were parked, not handled within 500 ms";
}

struct idle_actor {
  using message_type = int;
  void receive(int) {}
};
spindle::actor_ref<int> spawn_actor_for_race(runtime& rt) { return spindle::spawn_actor<idle_actor>(rt); }

// A spawn from a plain thread racing rt.shutdown() is refused or halted at the shutdown. Its
// stopping check was not ordered against the shutdown's one pass over the orphans: an actor whose
// adopt message came after that pass was never halted (its monitor never told) and its cell
// leaked (found by the issue 17 attack; predates it). The spawn is now inside the runtime's gate
// to outside threads from its check to its adopt message (actor.hpp, spawn_prepared).
TEST(ActorAttackA, ASpawnRacingTheRuntimesShutdownIsHaltedOrRefused) {
  const auto cells_before = spindle::actor_system::live_cells();
  long never_told = 0;
  for (int round = 0; round < 100; ++round) {
    std::vector<spindle::oneshot_receiver<spindle::exit_reason>> downs;
    {
      runtime rt({.workers = 2});
      std::atomic<bool> started{false};
      std::thread spawner([&] {
        started = true;
        for (;;) {
          try {
            downs.push_back(spindle::monitor_actor(spawn_actor_for_race(rt)));
          } catch (const spindle::runtime_stopped&) {
            return;
          }
        }
      });
      spindle::testing::spin_until([&] { return started.load(); });
      rt.shutdown();
      spawner.join();
    }
    for (auto& down : downs) never_told += down.is_ready() ? 0 : 1;
  }
  EXPECT_EQ(never_told, 0) << "actors spawned while the runtime shut down were never halted";
  EXPECT_EQ(spindle::actor_system::live_cells(), cells_before);
}

TEST(ActorAttackA, KvSessionOfAClientThatNeverReadsIsClosedByItsIdleTimeout) {
  runtime rt({.workers = 2});
  kv::server_options options;
  options.session.idle_timeout = std::chrono::milliseconds(200);
  kv::server server(rt, options);
  const std::uint16_t port = server.local_endpoint().port();
  auto connect_to_server = [port](int receive_buffer) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (receive_buffer > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    return fd;
  };
  // A big value, then GETs of it sent without reading a reply, until the socket is full both ways.
  const int hog = connect_to_server(4096);
  const std::string set = "SET big " + std::string(8000, 'v') + "\n";
  ASSERT_EQ(::send(hog, set.data(), set.size(), MSG_NOSIGNAL), ssize_t(set.size()));
  ::fcntl(hog, F_SETFL, O_NONBLOCK);
  const std::string get = "GET big\n";
  for (int i = 0; i < 100000; ++i) {
    if (::send(hog, get.data(), get.size(), MSG_NOSIGNAL) <= 0) break;
  }
  // The session is closed by its idle timeout (200 ms) at the latest: the server's side of the
  // connection is shut down, which the hog sees as a reset or an end after what it received.
  // Observed from outside without reading the hog (reading would unblock the session): the
  // sessions' supervisor lists no session but the one asking.
  auto sessions_listed = [&] {
    const auto sessions = spindle::whereis<spindle::dynamic_supervisor_message>(rt, kv::sessions_name);
    if (!sessions) return std::size_t(0);
    return std::size_t(spindle::testing::receive_within(spindle::dynamic_supervisor(sessions).stats()).listed);
  };
  EXPECT_TRUE(eventually([&] { return sessions_listed() == 0; }, std::chrono::seconds(5)))
      << "the session of a client that never reads was not closed 5 s after its 200 ms idle timeout";
  ::close(hog);
  server.stop();
}

}  // namespace
