// Lines over a Unix stream: a buffered writer, a vectored write, a buffered reader, deadlines.
#include <spindle/spindle.hpp>

#include <array>
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
namespace net = spindle::net;

std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

spindle::task<void> write_lines(net::unix_stream& stream) {
  // Small writes gather in the writer's buffer; flush() sends them in one system call.
  net::buffered_writer out(stream);
  co_await out.write("hello\n");
  co_await out.write("buffered\n");
  co_await out.flush();
  // A list of buffers goes out as one vectored write (one sendmsg), without copying them.
  const std::array<std::span<const std::byte>, 3> parts{bytes_of("vec"), bytes_of("tored"),
                                                         bytes_of("\n")};
  co_await stream.write_all(net::buffer_list(parts));
  stream.shutdown(SHUT_WR);  // the reader sees the end of the stream
}

spindle::task<std::vector<std::string>> read_lines(net::unix_stream& stream) {
  net::buffered_reader in(stream);
  std::vector<std::string> lines;
  for (;;) {
    // Each call has its own deadline (timeout_error if it passes); nullopt at the end.
    std::optional<std::string> line =
        co_await in.read_line(net::buffered_reader<net::unix_stream>::default_max_length,
                              spindle::io::deadline::after(5s));
    if (!line) break;
    lines.push_back(std::move(*line));
  }
  co_return lines;
}

spindle::task<bool> exchange() {
  auto [left, right] = net::unix_stream::pair();  // two connected ends
  auto reader = spindle::spawn(read_lines(right));
  co_await write_lines(left);
  const std::vector<std::string> lines = co_await std::move(reader);
  co_return lines == std::vector<std::string>{"hello", "buffered", "vectored"};
}

int main() {
  spindle::runtime rt;
  return rt.block_on(exchange()) ? 0 : 1;
}
