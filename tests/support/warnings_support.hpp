// Test helpers for the diagnostics' warnings (diagnostics/warnings.hpp, G4).
//
//   spindle::testing::fail_on_warnings guard(rt.warnings());  // the test fails if any warning
//                                                             // is raised while guard lives
//   spindle::testing::warning_catcher caught(rt.warnings());  // records delivered warnings;
//   ASSERT_TRUE(caught.wait_for(kind::stall));                 // bounded wait (5 s), no sleep
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "spindle/diagnostics/warnings.hpp"

namespace spindle::testing {

// Makes the enclosing test fail (a non-fatal failure per warning, each with its line) if any
// warning is raised on `hub` between construction and destruction (or check()). With the hub in
// strict mode (diagnostics_options::strict_warnings) it reports the recorded failures; without,
// it still fails on any raise, by the hub's counts.
class fail_on_warnings {
 public:
  explicit fail_on_warnings(diagnostics::warning_hub& hub) : hub_(hub) {
    hub_.clear_failures();
    raised_before_ = hub_.raised_total();
  }
  ~fail_on_warnings() { check(); }
  fail_on_warnings(const fail_on_warnings&) = delete;
  fail_on_warnings& operator=(const fail_on_warnings&) = delete;

  void check() {
    if (checked_) return;
    checked_ = true;
    const std::vector<diagnostics::warning> failures = hub_.failures();
    for (const diagnostics::warning& w : failures) {
      ADD_FAILURE() << "warning raised during the test: " << diagnostics::warning_hub::format(w);
    }
    const std::uint64_t raised = hub_.raised_total() - raised_before_;
    if (failures.empty() && raised != 0) {
      ADD_FAILURE() << raised << " warning(s) raised during the test";
    }
  }

 private:
  diagnostics::warning_hub& hub_;
  std::uint64_t raised_before_ = 0;
  bool checked_ = false;
};

// Installs a hook that records every delivered warning; wait_for waits (bounded) for one.
class warning_catcher {
 public:
  explicit warning_catcher(diagnostics::warning_hub& hub) : hub_(hub) {
    hub_.set_warning_hook([this](const diagnostics::warning& w) {
      std::lock_guard lock(mutex_);
      seen_.push_back(w);
      changed_.notify_all();
    });
  }
  ~warning_catcher() { hub_.set_warning_hook(nullptr); }
  warning_catcher(const warning_catcher&) = delete;
  warning_catcher& operator=(const warning_catcher&) = delete;

  // The first delivered warning of `kind`, waiting up to `limit` for it.
  bool wait_for(diagnostics::warning_kind kind, diagnostics::warning* out = nullptr,
                std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    std::unique_lock lock(mutex_);
    const bool found = changed_.wait_for(lock, limit, [&] { return find(kind) != nullptr; });
    if (found && out != nullptr) *out = *find(kind);
    return found;
  }
  bool seen(diagnostics::warning_kind kind) {
    std::lock_guard lock(mutex_);
    return find(kind) != nullptr;
  }
  std::vector<diagnostics::warning> all() {
    std::lock_guard lock(mutex_);
    return seen_;
  }

 private:
  const diagnostics::warning* find(diagnostics::warning_kind kind) const {
    for (const diagnostics::warning& w : seen_) {
      if (w.kind == kind) return &w;
    }
    return nullptr;
  }
  diagnostics::warning_hub& hub_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<diagnostics::warning> seen_;
};

}  // namespace spindle::testing
