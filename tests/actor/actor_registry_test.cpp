// Registered names (registry.hpp): register_name, whereis, unregister_name, send_to,
// monitor_name, the one-name rule, names freed when their actor halts, names in snapshots; and
// the lookup's cost (printed, never asserted).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "spindle/spindle.hpp"
#include "support/test_support.hpp"

namespace {

using spindle::actor_context;
using spindle::actor_handle;
using spindle::actor_ref;
using spindle::actor_state;
using spindle::exit_kind;
using spindle::runtime;
using spindle::send_result;
using spindle::spawn_actor;
using spindle::testing::eventually;

// Counts what it gets; stops on 0, crashes on a negative number.
struct registry_counter {
  using message_type = int;
  std::atomic<int>* received;
  void receive(int value, actor_context<int>& ctx) {
    if (value < 0) throw std::runtime_error("crashed on purpose");
    if (value == 0) {
      ctx.stop();
      return;
    }
    received->fetch_add(value, std::memory_order_relaxed);  // relaxed: read after a join
  }
};

struct other_type_actor {
  using message_type = std::string;
  void receive(std::string&) {}
};

bool halted_soon(const actor_handle& a) {
  return eventually([&] { return a.state() == actor_state::halted; }, std::chrono::seconds(10));
}

TEST(ActorRegistry, RegisteredNameFindsTheActor) {
  runtime rt({.workers = 2});
  std::atomic<int> received{0};
  auto counter = spawn_actor<registry_counter>(rt, &received);
  spindle::register_name(rt, "counter", counter);
  const actor_ref<int> found = spindle::whereis<int>(rt, "counter");
  ASSERT_TRUE(found);
  EXPECT_EQ(found, counter);
  EXPECT_EQ(spindle::whereis(rt, "counter"), counter);
  EXPECT_EQ(spindle::registered_name(rt, counter), "counter");
  const auto names = spindle::registered_names(rt);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0].first, "counter");
  EXPECT_EQ(names[0].second, counter.id());
  EXPECT_EQ(spindle::send_to<int>(rt, "counter", 5), send_result::queued);
  EXPECT_TRUE(eventually([&] { return received.load() == 5; }));
}

TEST(ActorRegistry, AnUnknownNameIsAnEmptyRefAndNoSuchName) {
  runtime rt({.workers = 1});
  EXPECT_FALSE(spindle::whereis<int>(rt, "nobody"));
  EXPECT_FALSE(spindle::whereis(rt, "nobody"));
  EXPECT_EQ(spindle::send_to<int>(rt, "nobody", 1), send_result::no_such_name);
  EXPECT_FALSE(spindle::unregister_name(rt, "nobody"));
  EXPECT_TRUE(spindle::registered_names(rt).empty());
  EXPECT_STREQ(spindle::actor_unavailable(send_result::no_such_name).what(),
               "spindle: no actor has that name");
}

TEST(ActorRegistry, TheWrongMessageTypeIsAUsageError) {
  runtime rt({.workers = 1});
  auto text = spawn_actor<other_type_actor>(rt);
  spindle::register_name(rt, "text", text);
  EXPECT_THROW((void)spindle::whereis<int>(rt, "text"), spindle::usage_error);
  EXPECT_THROW((void)spindle::send_to<int>(rt, "text", 1), spindle::usage_error);
  EXPECT_EQ(spindle::send_to<std::string>(rt, "text", std::string("hi")), send_result::queued);
}

TEST(ActorRegistry, ANameTakenTwiceIsNameInUse) {
  runtime rt({.workers = 1});
  std::atomic<int> received{0};
  auto first = spawn_actor<registry_counter>(rt, &received);
  auto second = spawn_actor<registry_counter>(rt, &received);
  spindle::register_name(rt, "db", first);
  try {
    spindle::register_name(rt, "db", second);
    FAIL() << "a second actor took a name in use";
  } catch (const spindle::name_in_use& e) {
    EXPECT_EQ(e.name, "db");
    EXPECT_EQ(e.holder, first.id());
    EXPECT_NE(std::string(e.what()).find("taken"), std::string::npos) << e.what();
  }
  EXPECT_EQ(spindle::whereis(rt, "db"), first);  // unchanged
  EXPECT_FALSE(spindle::registered_name(rt, second));
  // name_in_use is a usage_error: generic handlers of misuse catch it.
  EXPECT_THROW(spindle::register_name(rt, "db", second), spindle::usage_error);
}

TEST(ActorRegistry, AnActorHasOneName) {
  runtime rt({.workers = 1});
  std::atomic<int> received{0};
  auto a = spawn_actor<registry_counter>(rt, &received);
  spindle::register_name(rt, "primary", a);
  try {
    spindle::register_name(rt, "secondary", a);
    FAIL() << "an actor got a second name";
  } catch (const spindle::name_in_use& e) {
    EXPECT_EQ(e.name, "secondary");
    EXPECT_EQ(e.existing, "primary");
    EXPECT_EQ(e.holder, 0u);
  }
  EXPECT_THROW(spindle::register_name(rt, "primary", a), spindle::name_in_use);  // again: no
  EXPECT_FALSE(spindle::whereis(rt, "secondary"));
  // Unregistered, it may take another name.
  EXPECT_TRUE(spindle::unregister_name(rt, "primary"));
  spindle::register_name(rt, "secondary", a);
  EXPECT_EQ(spindle::registered_name(rt, a), "secondary");
}

TEST(ActorRegistry, UnregisterFreesTheNameAndTheActorKeepsRunning) {
  runtime rt({.workers = 2});
  std::atomic<int> received{0};
  auto a = spawn_actor<registry_counter>(rt, &received);
  spindle::register_name(rt, "temp", a);
  EXPECT_TRUE(spindle::unregister_name(rt, "temp"));
  EXPECT_FALSE(spindle::unregister_name(rt, "temp"));
  EXPECT_FALSE(spindle::whereis(rt, "temp"));
  EXPECT_EQ(spindle::send_to<int>(rt, "temp", 1), send_result::no_such_name);
  EXPECT_EQ(a.send(3), send_result::queued);
  EXPECT_TRUE(eventually([&] { return received.load() == 3; }));
  EXPECT_NE(a.state(), actor_state::halted);
  // Another actor may have the name now; the first one's halt does not free it.
  auto b = spawn_actor<registry_counter>(rt, &received);
  spindle::register_name(rt, "temp", b);
  auto first_down = spindle::monitor_actor(a);
  a.send(0);
  EXPECT_EQ(first_down.blocking_receive().kind, exit_kind::normal);
  EXPECT_EQ(spindle::whereis(rt, "temp"), b);
}

TEST(ActorRegistry, TheNameIsFreedWhenItsActorHalts) {
  runtime rt({.workers = 2});
  std::atomic<int> received{0};
  for (const int how : {0, -1, 1}) {  // stops itself, crashes, is killed
    auto a = spawn_actor<registry_counter>(rt, &received);
    spindle::register_name(rt, "short-lived", a);
    // Told once the actor is Halted: from then on it has no name (registry.hpp).
    auto down = spindle::monitor_actor(a);
    if (how == 1) {
      a.kill();
    } else {
      a.send(how);
    }
    const spindle::exit_reason why = down.blocking_receive();
    EXPECT_EQ(why.kind, how == 0 ? exit_kind::normal : how < 0 ? exit_kind::crashed : exit_kind::killed);
    EXPECT_TRUE(spindle::registered_names(rt).empty()) << "how " << how;
    EXPECT_FALSE(spindle::registered_name(rt, a));
    EXPECT_FALSE(spindle::whereis(rt, "short-lived"));
    EXPECT_EQ(spindle::send_to<int>(rt, "short-lived", 1), send_result::no_such_name);
  }
}

TEST(ActorRegistry, ANameIsFreeAsSoonAsItsActorIsSeenHalted) {
  runtime rt({.workers = 2});
  std::atomic<int> received{0};
  for (int round = 0; round < 200; ++round) {
    auto a = spawn_actor<registry_counter>(rt, &received);
    spindle::register_name(rt, "reused", a);
    a.kill();
    ASSERT_TRUE(halted_soon(a));
    // Halted: the name is free, even if a's halt has not run its callback yet; and that late
    // callback does not free the new registration.
    EXPECT_FALSE(spindle::whereis(rt, "reused"));
    auto b = spawn_actor<registry_counter>(rt, &received);
    spindle::register_name(rt, "reused", b);
    auto a_down = spindle::monitor_actor(a);  // after a's name callback, whenever it ran
    a_down.blocking_receive();
    ASSERT_EQ(spindle::whereis(rt, "reused"), b) << "round " << round;
    ASSERT_TRUE(spindle::unregister_name(rt, "reused"));
    b.kill();
  }
}

TEST(ActorRegistry, RegisteringAHaltedActorIsActorUnavailable) {
  runtime rt({.workers = 1});
  std::atomic<int> received{0};
  auto a = spawn_actor<registry_counter>(rt, &received);
  a.send(0);
  ASSERT_TRUE(halted_soon(a));
  try {
    spindle::register_name(rt, "late", a);
    FAIL() << "a halted actor got a name";
  } catch (const spindle::actor_unavailable& e) {
    EXPECT_EQ(e.reason, send_result::halted);
  }
  EXPECT_TRUE(spindle::registered_names(rt).empty());
}

TEST(ActorRegistry, EmptyNamesEmptyHandlesAndForeignActorsAreUsageErrors) {
  runtime rt({.workers = 1});
  runtime other({.workers = 1});
  std::atomic<int> received{0};
  auto a = spawn_actor<registry_counter>(rt, &received);
  auto foreign = spawn_actor<registry_counter>(other, &received);
  EXPECT_THROW(spindle::register_name(rt, "", a), spindle::usage_error);
  EXPECT_THROW(spindle::register_name(rt, "x", actor_handle()), spindle::usage_error);
  EXPECT_THROW(spindle::register_name(rt, "x", foreign), spindle::usage_error);
  EXPECT_TRUE(spindle::registered_names(rt).empty());
  EXPECT_TRUE(spindle::registered_names(other).empty());
  // Outside a worker, the name-only forms have no runtime to look in.
  EXPECT_THROW((void)spindle::whereis<int>("x"), spindle::usage_error);
  EXPECT_THROW((void)spindle::send_to<int>("x", 1), spindle::usage_error);
}

// Sends by name from its handler: the name-only forms use the calling worker's runtime.
struct name_relay {
  using message_type = int;
  void receive(int value) {
    if (spindle::send_to<int>("sink", value + 1) != send_result::queued) {
      throw std::runtime_error("sink missing");
    }
  }
};

TEST(ActorRegistry, HandlersAndTasksSendByName) {
  runtime rt({.workers = 2});
  std::atomic<int> received{0};
  auto sink = spawn_actor<registry_counter>(rt, &received);
  spindle::register_name(rt, "sink", sink);
  auto r = spawn_actor<name_relay>(rt);
  r.send(9);
  EXPECT_TRUE(eventually([&] { return received.load() == 10; }));
  const bool found = rt.block_on([]() -> spindle::task<bool> {
    const auto s = spindle::whereis<int>("sink");
    co_return s && s.send(5) == send_result::queued;
  }());
  EXPECT_TRUE(found);
  EXPECT_TRUE(eventually([&] { return received.load() == 15; }));
}

TEST(ActorRegistry, ATaskAwaitsTheExitOfANamedActor) {
  runtime rt({.workers = 2});
  std::atomic<int> received{0};
  auto a = spawn_actor<registry_counter>(rt, &received);
  spindle::register_name(rt, "watched", a);
  std::atomic<bool> watching{false};
  auto waiting = rt.spawn([](runtime& r, std::atomic<bool>& placed) -> spindle::task<exit_kind> {
    auto down = spindle::monitor_name(r, "watched");
    placed.store(true, std::memory_order_release);  // release: the watch is placed
    const spindle::exit_reason why = co_await std::move(down);
    co_return why.kind;
  }(rt, watching));
  ASSERT_TRUE(eventually([&] { return watching.load(std::memory_order_acquire); }));
  // The watch follows the actor: unregistering the name changes nothing.
  EXPECT_TRUE(spindle::unregister_name(rt, "watched"));
  a.send(-1);
  EXPECT_EQ(spindle::testing::join_bounded(std::move(waiting)), exit_kind::crashed);
  // No such name: told at once, as Erlang's noproc.
  EXPECT_EQ(spindle::monitor_name(rt, "watched").blocking_receive().kind, exit_kind::no_actor);
}

TEST(ActorRegistry, SnapshotsListRegisteredNames) {
  runtime rt({.workers = 1});
  std::atomic<int> received{0};
  auto named = spawn_actor<registry_counter>(rt, &received);
  auto unnamed = spawn_actor<registry_counter>(rt, &received);
  spindle::register_name(rt, "listed", named);
  const std::vector<spindle::actor_info> actors = spindle::actors_of(rt).snapshot();
  int seen = 0;
  for (const spindle::actor_info& info : actors) {
    if (info.id == named.id()) {
      EXPECT_EQ(info.registered_name, "listed");
      ++seen;
    } else if (info.id == unnamed.id()) {
      EXPECT_TRUE(info.registered_name.empty());
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2);
  const std::string json = rt.snapshot_json();
  EXPECT_NE(json.find("\"registered_name\":\"listed\""), std::string::npos);
}

TEST(ActorRegistry, ShutdownFreesNamesAndCells) {
  const std::uint64_t before = spindle::actor_system::live_cells();
  {
    runtime rt({.workers = 2});
    std::atomic<int> received{0};
    for (int i = 0; i < 50; ++i) {
      auto a = spawn_actor<registry_counter>(rt, &received);
      spindle::register_name(rt, "n" + std::to_string(i), a);
      if (i % 2 == 0) {
        EXPECT_TRUE(spindle::unregister_name(rt, "n" + std::to_string(i)));
        spindle::register_name(rt, "n" + std::to_string(i) + "b", a);
      }
    }
  }
  EXPECT_EQ(spindle::actor_system::live_cells(), before);
}

// The cost of a lookup (printed for docs/design/actors.md; no timing is asserted): whereis of a
// name among 1,000, from one thread and from two at once, each also dropping the reference.
// spawn_registered: the name is there before the actor's first step, and a taken name
// leaves no actor behind.
struct knows_its_name {
  using message_type = int;
  std::atomic<int>* found_itself;
  std::atomic<int>* lives;
  knows_its_name(std::atomic<int>* found, std::atomic<int>* alive)
      : found_itself(found), lives(alive) {
    lives->fetch_add(1);
  }
  knows_its_name(const knows_its_name&) = delete;
  ~knows_its_name() { lives->fetch_sub(1); }
  void on_start(actor_context<int>& ctx) {
    found_itself->store(spindle::whereis<int>("unique") == ctx.self() ? 1 : -1);
  }
  void receive(int, actor_context<int>& ctx) { ctx.stop(); }
};

TEST(ActorRegistry, SpawnRegisteredNamesTheActorBeforeItStarts) {
  runtime rt({.workers = 2});
  std::atomic<int> found{0}, lives{0};
  auto first = spindle::spawn_registered<knows_its_name>(rt, "unique", &found, &lives);
  ASSERT_TRUE(eventually([&] { return found.load() != 0; }));
  EXPECT_EQ(found.load(), 1) << "on_start did not find the actor under its name";
  EXPECT_EQ(spindle::whereis(rt, "unique"), first);
  // Taken: name_in_use, and the second actor never existed (no on_start, behaviour gone).
  found.store(0);
  EXPECT_THROW((void)spindle::spawn_registered<knows_its_name>(rt, "unique", &found, &lives),
               spindle::name_in_use);
  EXPECT_THROW((void)spindle::spawn_registered<knows_its_name>(rt, "", &found, &lives),
               spindle::usage_error);
  EXPECT_EQ(lives.load(), 1);
  EXPECT_EQ(found.load(), 0);
  EXPECT_EQ(spindle::whereis(rt, "unique"), first);
  // The name is freed when it halts, and can be spawned again.
  first.send(1);
  ASSERT_TRUE(halted_soon(first));
  auto again = spindle::spawn_registered<knows_its_name>(rt, "unique", &found, &lives);
  ASSERT_TRUE(eventually([&] { return found.load() == 1; }));
  EXPECT_EQ(spindle::whereis(rt, "unique"), again);
}

// A plain thread sends by name while the actor is being spawned under it: every send that the
// name accepted is delivered, exactly once, including those that came before the actor's home
// adopted it (the window in which a wake of an idle cell would have reached a home that did
// not know it). Many rounds, a fresh name each, on an actor with no on_start (idle-spawned
// otherwise).
TEST(ActorRegistry, SendsByNameRacingSpawnRegisteredAreAllDelivered) {
  runtime rt({.workers = 2});
  for (int round = 0; round < 300; ++round) {
    const std::string name = "racer-" + std::to_string(round);
    std::atomic<int> received{0};
    std::atomic<bool> spawned{false};
    std::atomic<int> accepted{0};
    std::thread sender([&] {
      int sent = 0;
      // Until well after the spawn returned: sends before it find no name (not counted).
      while (!spawned.load() || sent < 50) {
        if (spindle::send_to<int>(rt, name, 1) == send_result::queued) ++sent;
      }
      accepted.store(sent);
    });
    auto ref = spindle::spawn_registered<registry_counter>(rt, name, &received);
    spawned.store(true);
    sender.join();
    ASSERT_TRUE(eventually([&] { return received.load() == accepted.load(); }))
        << "round " << round << ": " << received.load() << " of " << accepted.load();
    ref.send(0);
    ASSERT_TRUE(halted_soon(ref));
  }
}

TEST(ActorRegistry, LookupCost) {
  runtime rt({.workers = 1});
  std::atomic<int> received{0};
  std::vector<actor_ref<int>> actors;
  for (int i = 0; i < 1000; ++i) {
    actors.push_back(spawn_actor<registry_counter>(rt, &received));
    spindle::register_name(rt, "service-" + std::to_string(i), actors.back());
  }
  const std::string names[4] = {"service-1", "service-500", "service-999", "missing"};
  constexpr int lookups = spindle::testing::under_tsan ? 40'000 : 400'000;
  auto measure = [&](int offset) {
    std::uint64_t found = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < lookups; ++i) {
      found += bool(spindle::whereis<int>(rt, names[(i + offset) & 3]));
    }
    const auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start);
    EXPECT_EQ(found, std::uint64_t(lookups) / 4 * 3);
    return ns.count() / lookups;
  };
  const double alone = measure(0);
  double together[2] = {0, 0};
  std::thread other([&] { together[1] = measure(1); });
  together[0] = measure(2);
  other.join();
  std::printf("whereis<M>: %.1f ns a lookup alone, %.1f / %.1f ns with two threads looking up\n",
              alone, together[0], together[1]);
}

}  // namespace
