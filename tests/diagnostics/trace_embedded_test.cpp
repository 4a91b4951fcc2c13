// Tracing (SPEC G3) of the embedded executor: its tick's polls, spawns and timer fires go to its
// own ring (the host's thread is no executor), exported as "embedded executor 0".
#include <spindle/spindle.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <string>

#include "spindle/diagnostics/trace_export.hpp"
#include "support/test_host.hpp"

namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

spindle::task<int> leaf(int i) {
  co_await spindle::sleep_for(1ms);
  co_return i;
}

spindle::task<int> parent() {
  auto a = spindle::spawn(leaf(1));
  auto b = spindle::spawn(leaf(2));
  co_return co_await std::move(a) + co_await std::move(b);
}

TEST(TraceEmbedded, TicksAreTracedOnTheEmbeddedExecutorsThread) {
  spindle::testing::test_host host;
  spindle::embed::embedded_executor executor(host);
  // Off by default: nothing recorded.
  EXPECT_FALSE(spindle::diagnostics::tracing(executor.diagnostics_registry()));
  ASSERT_TRUE(spindle::diagnostics::set_tracing(executor.diagnostics_registry(), true));
  auto h = executor.spawn(parent());
  host.run_until_idle(executor);
  host.advance(1ms);
  host.run_until_idle(executor);
  ASSERT_TRUE(h.is_finished());
  EXPECT_EQ(h.join(), 3);
  const json trace = json::parse(spindle::diagnostics::trace_json(executor.diagnostics_registry(), 0ms));
  std::map<std::string, int> on_executor;  // first word of the name -> count, on tid 1
  bool named = false;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("tid") == 1) {
      named = e.at("args").at("name") == "embedded executor 0";
    }
    if (e.at("ph") == "X" && e.at("tid") == 1) {
      const std::string name = e.at("name");
      on_executor[name.substr(0, name.find(' '))]++;
    }
  }
  EXPECT_TRUE(named);
  EXPECT_GE(on_executor["poll"], 5);   // parent twice at least, each leaf twice (sleep)
  EXPECT_EQ(on_executor["spawn"], 2);  // the leaves, spawned inside the tick
  EXPECT_EQ(on_executor["timer"], 2);
  ASSERT_TRUE(spindle::diagnostics::set_tracing(executor.diagnostics_registry(), false));
}

}  // namespace
