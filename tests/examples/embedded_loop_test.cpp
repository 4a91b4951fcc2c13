// examples/embedded_loop.cpp run as a process: a host event loop drives an embedded executor
// (timers in host time, a foreign thread's messages, a callback API behind a turnstile, a
// timeout). The program checks its own results; here its exit status and report are checked.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#ifndef SPINDLE_EXAMPLE_PROGRAM
#error "SPINDLE_EXAMPLE_PROGRAM (the path of spindle-example-embedded_loop) must be defined"
#endif

namespace {

TEST(EmbeddedLoopExample, RunsEveryKindOfTaskAndExitsCleanly) {
  FILE* child = popen(SPINDLE_EXAMPLE_PROGRAM, "r");
  ASSERT_NE(child, nullptr);
  std::string output;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, child) != nullptr) output += buffer;
  const int status = pclose(child);
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 0) << output;
  EXPECT_NE(output.find("frames animated: 5\n"), std::string::npos) << output;
  EXPECT_NE(output.find("messages summed: 5050\n"), std::string::npos) << output;
  EXPECT_NE(output.find("bytes downloaded: 4096\n"), std::string::npos) << output;
  EXPECT_NE(output.find("request timed out: yes\n"), std::string::npos) << output;
  EXPECT_NE(output.find("\nok\n"), std::string::npos) << output;
}

}  // namespace
