// examples/wordcount.cpp run as a process: on a generated tree (files of every size from empty to
// several 256 KiB chunks, words cut by the chunk boundaries, many small files packed together,
// nested directories, a symbolic link that is not followed) its three modes print exactly the
// counts this test computes itself; on /usr/share/doc, when present, the bridge and naive modes
// print what the serial mode prints.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#ifndef SPINDLE_EXAMPLE_PROGRAM
#error "SPINDLE_EXAMPLE_PROGRAM (the path of spindle-example-wordcount) must be defined"
#endif

namespace {

struct wordcount_run {
  int status = -1;
  std::string totals;  // the first line: lines words bytes files
  std::string output;
};

wordcount_run run_wordcount(const std::string& directory, const char* mode) {
  const std::string command =
      std::string(SPINDLE_EXAMPLE_PROGRAM) + " '" + directory + "' 2 " + mode + " 2>/dev/null";
  wordcount_run run;
  FILE* child = popen(command.c_str(), "r");
  if (child == nullptr) return run;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, child) != nullptr) run.output += buffer;
  run.status = pclose(child);
  run.totals = run.output.substr(0, run.output.find('\n'));
  return run;
}

bool wordcount_is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

TEST(WordcountExample, EveryModeCountsAGeneratedTreeExactly) {
  char pattern[] = "/tmp/spindle-wordcount-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::filesystem::path root = pattern;
  std::mt19937 random(16);
  std::uint64_t lines = 0, words = 0, bytes = 0, files = 0;
  const char alphabet[] = "ab \n\tcd\r\vx  \fyz";
  const std::size_t sizes[] = {0, 1, 2, 100, 4095, 262143, 262144, 262145, 700001};
  for (int i = 0; i < 300; ++i) {
    const std::filesystem::path directory = root / ("d" + std::to_string(i % 7)) /
                                            ("e" + std::to_string(i % 3));
    std::filesystem::create_directories(directory);
    const std::size_t size = i < 9 ? sizes[i] : random() % 3000;
    std::string text(size, ' ');
    // Long words too, so that some cross a chunk boundary.
    for (auto& c : text) c = random() % 5 == 0 ? alphabet[random() % (sizeof alphabet - 1)] : 'w';
    std::ofstream(directory / ("f" + std::to_string(i)), std::ios::binary) << text;
    bool after_space = true;
    for (unsigned char c : text) {
      lines += c == '\n';
      words += after_space && !wordcount_is_space(c);
      after_space = wordcount_is_space(c);
    }
    bytes += size;
    ++files;
  }
  std::filesystem::create_symlink(root / "d0", root / "link");  // not followed
  const std::string expected = std::to_string(lines) + " " + std::to_string(words) + " " +
                               std::to_string(bytes) + " " + std::to_string(files);
  for (const char* mode : {"serial", "naive", "bridge", "files"}) {
    const wordcount_run run = run_wordcount(root.string(), mode);
    ASSERT_TRUE(WIFEXITED(run.status)) << mode << "\n" << run.output;
    EXPECT_EQ(WEXITSTATUS(run.status), 0) << mode << "\n" << run.output;
    EXPECT_EQ(run.totals, expected) << mode;
  }
  std::filesystem::remove_all(root);
}

TEST(WordcountExample, TheSpindleModesMatchTheSerialOneOnUsrShareDoc) {
  if (!std::filesystem::is_directory("/usr/share/doc")) GTEST_SKIP() << "no /usr/share/doc";
  const wordcount_run serial = run_wordcount("/usr/share/doc", "serial");
  ASSERT_TRUE(WIFEXITED(serial.status) && WEXITSTATUS(serial.status) == 0) << serial.output;
  for (const char* mode : {"naive", "bridge", "files"}) {
    const wordcount_run run = run_wordcount("/usr/share/doc", mode);
    ASSERT_TRUE(WIFEXITED(run.status)) << mode << "\n" << run.output;
    EXPECT_EQ(WEXITSTATUS(run.status), 0) << mode << "\n" << run.output;
    EXPECT_EQ(run.totals, serial.totals) << mode;
  }
}

}  // namespace
