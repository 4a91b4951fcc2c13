// examples/live_view.cpp run as a process with SPINDLE_DIAGNOSTICS=127.0.0.1:0, looked at by
// headless Chromium (Debian: chromium): the page renders the executors and the named tasks
// (refund-desk waits on a channel nobody sends on), and a screenshot of it is written to
// SPINDLE_TEST_OUTPUT_DIR/diagnostics-page.png.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "support/http_test_client.hpp"

#ifndef SPINDLE_EXAMPLE_PROGRAM
#error "SPINDLE_EXAMPLE_PROGRAM (the path of spindle-example-live_view) must be defined"
#endif
#ifndef SPINDLE_TEST_OUTPUT_DIR
#define SPINDLE_TEST_OUTPUT_DIR "."
#endif

namespace {

using namespace std::chrono_literals;

constexpr const char* chromium = "/usr/bin/chromium";

// The example as a child: stdin is a pipe (closing it ends the program), stderr is read here.
struct child_program {
  pid_t pid = -1;
  int stdin_fd = -1;
  int stderr_fd = -1;

  void start() {
    int in[2];
    int err[2];
    ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
    ASSERT_EQ(::pipe2(err, O_CLOEXEC), 0);
    pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::dup2(in[0], 0);
      ::dup2(err[1], 2);
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::setenv("SPINDLE_DIAGNOSTICS", "127.0.0.1:0", 1);
      ::execl(SPINDLE_EXAMPLE_PROGRAM, SPINDLE_EXAMPLE_PROGRAM, static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(err[1]);
    stdin_fd = in[1];
    stderr_fd = err[0];
  }

  // The port from "spindle: diagnostics of this runtime at http://127.0.0.1:PORT/".
  std::uint16_t port(std::string& said) {
    const std::regex line("http://127\\.0\\.0\\.1:([0-9]+)/");
    const auto until = std::chrono::steady_clock::now() + 10s;
    std::smatch m;
    while (!std::regex_search(said, m, line)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return 0;
      pollfd p{stderr_fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buffer[512];
      const ssize_t n = ::read(stderr_fd, buffer, sizeof buffer);
      if (n <= 0) return 0;
      said.append(buffer, static_cast<std::size_t>(n));
    }
    return static_cast<std::uint16_t>(std::stoi(m[1]));
  }

  int finish() {
    if (stdin_fd >= 0) ::close(stdin_fd);
    stdin_fd = -1;
    int status = 0;
    if (pid > 0) ::waitpid(pid, &status, 0);
    pid = -1;
    if (stderr_fd >= 0) ::close(stderr_fd);
    stderr_fd = -1;
    return status;
  }
  ~child_program() {
    if (pid > 0) ::kill(pid, SIGKILL);
    finish();
  }
};

std::string run(const std::string& command) {
  std::string output;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return output;
  char buffer[4096];
  std::size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, p)) > 0) output.append(buffer, n);
  ::pclose(p);
  return output;
}

TEST(LiveViewExample, ChromiumRendersTheExecutorsAndTheNamedTasks) {
  if (::access(chromium, X_OK) != 0) GTEST_SKIP() << chromium << " is not installed";
  child_program program;
  program.start();
  std::string said;
  const std::uint16_t port = program.port(said);
  ASSERT_NE(port, 0) << "no diagnostics address on stderr: " << said;

  // The page's first fetch finds the tasks once they were spawned.
  const auto until = std::chrono::steady_clock::now() + 10s;
  std::string snapshot;
  while (std::chrono::steady_clock::now() < until &&
         snapshot.find("\"refund-desk\"") == std::string::npos) {
    snapshot = spindle::test::get(port, "/api/snapshot").body;
  }
  ASSERT_NE(snapshot.find("\"refund-desk\""), std::string::npos) << snapshot;

  char profile_template[] = "/tmp/spindle-chromium-XXXXXX";
  ASSERT_NE(::mkdtemp(profile_template), nullptr);
  const std::string profile = profile_template;
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  const std::string chromium_command = std::string("timeout 20 ") + chromium +
                                       " --headless=new --no-sandbox --disable-gpu"
                                       " --no-first-run --user-data-dir=" + profile +
                                       " --virtual-time-budget=3000 ";

  const std::string dom = run(chromium_command + "--dump-dom " + url + " 2>/dev/null");
  EXPECT_NE(dom.find("<title>spindle live view</title>"), std::string::npos) << dom.substr(0, 500);
  EXPECT_NE(dom.find(">executor 0<"), std::string::npos);
  EXPECT_NE(dom.find(">executor 1<"), std::string::npos);
  EXPECT_NE(dom.find(">refund-desk<"), std::string::npos);
  EXPECT_NE(dom.find(">order-packer<"), std::string::npos);
  EXPECT_NE(dom.find("class=\"uplot"), std::string::npos);  // the load plot was drawn
  EXPECT_NE(dom.find("<span id=\"error\"></span>"), std::string::npos);  // no failed fetch

  std::filesystem::create_directories(SPINDLE_TEST_OUTPUT_DIR);
  const std::string png = std::string(SPINDLE_TEST_OUTPUT_DIR) + "/diagnostics-page.png";
  std::filesystem::remove(png);
  run(chromium_command + "--window-size=1400,900 --screenshot=" + png + " " + url +
      " > /dev/null 2>&1");
  std::filesystem::remove_all(profile);
  ASSERT_TRUE(std::filesystem::exists(png));
  EXPECT_GT(std::filesystem::file_size(png), 20000u);  // a page, not a blank image
  std::ifstream image(png, std::ios::binary);
  char signature[8] = {};
  image.read(signature, 8);
  EXPECT_EQ(std::string(signature, 8), std::string("\x89PNG\r\n\x1a\n", 8));

  const int status = program.finish();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
