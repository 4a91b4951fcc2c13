// Positioned file reads and writes through the executor's reactor (io_uring or epoll).
#include <spindle/spindle.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

spindle::task<bool> round_trip(std::string path) {
  const std::string text = "spindle writes this at offset 100";
  auto f = co_await spindle::io::file::open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  co_await f.write_all_at(std::as_bytes(std::span(text)), 100);
  co_await f.sync();

  std::vector<std::byte> back(text.size());
  co_await f.read_exact_at(back, 100);  // throws if the file ends first
  const bool same = std::string(reinterpret_cast<const char*>(back.data()), back.size()) == text;
  const bool sized = f.size() == 100 + text.size();
  co_await f.close();
  co_return same && sized;
}

int main() {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("spindle-guide-" + std::to_string(::getpid()) + ".bin");
  spindle::runtime rt;
  const bool ok = rt.block_on(round_trip(path.string()));
  std::filesystem::remove(path);
  return ok ? 0 : 1;
}
