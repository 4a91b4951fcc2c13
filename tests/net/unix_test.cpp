// Unix domain sockets on both reactor backends: stream echo over a path and over an abstract
// name, unlink on close (and not of a file that replaced ours), EADDRINUSE on an existing path,
// datagrams with sender addresses (path, abstract, unnamed) and truncation, pairs, refused
// connections, address validation, and no descriptor left behind.
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "net/net_test_support.hpp"
#include "spindle/net/unix.hpp"

namespace {

using namespace net_test;
using namespace std::chrono_literals;
using spindle::task;
using spindle::net::unix_datagram;
using spindle::net::unix_endpoint;
using spindle::net::unix_listener;
using spindle::net::unix_stream;
using spindle::testing::join_bounded;

class NetUnix : public on_backend {};
SPINDLE_NET_ON_BOTH_BACKENDS(NetUnix);

// A path unique to this process and test.
std::string unix_test_path(const std::string& name) {
  return "/tmp/spindle-unix-" + std::to_string(::getpid()) + "-" + name;
}

bool unix_path_exists(const std::string& path) {
  struct stat info{};
  return ::lstat(path.c_str(), &info) == 0;
}

task<std::string> unix_echo_once(unix_listener& listener, unix_endpoint remote) {
  auto accepting = spindle::spawn(listener.accept());
  unix_stream client = co_await unix_stream::connect(remote);
  unix_stream server = co_await std::move(accepting);
  co_await client.write_all(std::string_view("ping over unix"));
  client.shutdown(SHUT_WR);
  std::array<std::byte, 64> buffer;
  std::size_t got = 0;
  for (;;) {
    const std::size_t n = co_await server.read(std::span(buffer).subspan(got));
    if (n == 0) break;
    got += n;
  }
  co_await server.write_all(std::span<const std::byte>(buffer.data(), got));
  server.shutdown(SHUT_WR);
  std::array<std::byte, 64> back;
  std::size_t back_size = 0;
  for (;;) {
    const std::size_t n = co_await client.read(std::span(back).subspan(back_size));
    if (n == 0) break;
    back_size += n;
  }
  std::string peer = server.remote_endpoint().is_unnamed() ? "" : "named client?";
  co_return peer + std::string(reinterpret_cast<const char*>(back.data()), back_size);
}

TEST_P(NetUnix, StreamEchoOverAPathThenTheListenerUnlinksIt) {
  spindle::runtime rt(options());
  const std::string path = unix_test_path("stream");
  ::unlink(path.c_str());
  {
    auto listener = unix_listener::bind(unix_endpoint::path(path));
    EXPECT_EQ(listener.local_endpoint(), unix_endpoint::path(path));
    EXPECT_EQ(listener.local_endpoint().to_string(), path);
    EXPECT_TRUE(unix_path_exists(path));
    EXPECT_EQ(join_bounded(rt.spawn(unix_echo_once(listener, unix_endpoint::path(path))), 30s),
              "ping over unix");
    // Bound again while it exists: EADDRINUSE, and the existing file is not touched.
    try {
      (void)unix_listener::bind(unix_endpoint::path(path));
      ADD_FAILURE() << "bind to an existing path succeeded";
    } catch (const std::system_error& e) {
      EXPECT_EQ(error_of(e), EADDRINUSE);
    }
    EXPECT_TRUE(unix_path_exists(path));
  }
  EXPECT_FALSE(unix_path_exists(path));  // the destructor unlinked it
}

TEST_P(NetUnix, StreamEchoOverAnAbstractName) {
  spindle::runtime rt(options());
  const auto name = unix_endpoint::abstract("spindle-test-" + std::to_string(::getpid()) + "-" +
                                            std::to_string(int(GetParam())));
  EXPECT_TRUE(name.is_abstract());
  EXPECT_EQ(name.to_string(), "@" + name.name());
  auto listener = unix_listener::bind(name);
  EXPECT_EQ(listener.local_endpoint(), name);
  EXPECT_EQ(join_bounded(rt.spawn(unix_echo_once(listener, name)), 30s), "ping over unix");
}

TEST_P(NetUnix, CloseKeepsAFileThatReplacedTheSocket) {
  const std::string path = unix_test_path("replaced");
  ::unlink(path.c_str());
  {
    auto listener = unix_listener::bind(unix_endpoint::path(path));
    ::unlink(path.c_str());  // someone removed it and put a regular file there
    const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  EXPECT_TRUE(unix_path_exists(path));
  ::unlink(path.c_str());
}

task<int> unix_connect_refused(unix_endpoint remote) {
  try {
    (void)co_await unix_stream::connect(remote);
  } catch (const std::system_error& e) {
    co_return error_of(e);
  }
  co_return 0;
}

TEST_P(NetUnix, ConnectingToNothingIsRefused) {
  spindle::runtime rt(options());
  const std::string path = unix_test_path("nothing");
  ::unlink(path.c_str());
  EXPECT_EQ(join_bounded(rt.spawn(unix_connect_refused(unix_endpoint::path(path))), 30s), ENOENT);
  EXPECT_EQ(join_bounded(rt.spawn(unix_connect_refused(unix_endpoint::abstract(
                             "spindle-nothing-" + std::to_string(::getpid())))),
                         30s),
            ECONNREFUSED);
}

TEST(NetUnixEndpoint, AddressesAreValidated) {
  EXPECT_THROW((void)unix_endpoint::path(""), spindle::usage_error);
  EXPECT_THROW((void)unix_endpoint::path(std::string(108, 'x')), spindle::usage_error);
  EXPECT_THROW((void)unix_endpoint::path(std::string("a\0b", 3)), spindle::usage_error);
  EXPECT_NO_THROW((void)unix_endpoint::path(std::string(107, 'x')));
  EXPECT_THROW((void)unix_endpoint::abstract(std::string(108, 'x')), spindle::usage_error);
  EXPECT_EQ(unix_endpoint::abstract(std::string("a\0b", 3)).name(), std::string("a\0b", 3));
  EXPECT_TRUE(unix_endpoint{}.is_unnamed());
  EXPECT_EQ(unix_endpoint{}.to_string(), "");
  EXPECT_NE(unix_endpoint::path("/a"), unix_endpoint::abstract("/a"));
  EXPECT_THROW((void)unix_listener::bind(unix_endpoint{}), spindle::usage_error);
  EXPECT_THROW((void)unix_datagram::bind(unix_endpoint{}), spindle::usage_error);
}

struct unix_datagram_outcome {
  std::string text;
  std::string sender;
  bool truncated = false;
};

task<std::vector<unix_datagram_outcome>> unix_datagram_exchange(std::string path, unix_endpoint abstract_name) {
  std::vector<unix_datagram_outcome> outcomes;
  auto receiver = unix_datagram::bind(unix_endpoint::path(path));
  auto named = unix_datagram::bind(abstract_name);
  auto anonymous = unix_datagram::unbound();
  std::array<std::byte, 8> buffer;
  co_await named.send_to(spindle::net::as_bytes("from abstract"), unix_endpoint::path(path));
  auto got = co_await receiver.receive_from(buffer);
  outcomes.push_back({std::string(reinterpret_cast<const char*>(buffer.data()), got.size),
                      got.sender.to_string(), got.truncated});
  co_await anonymous.send_to(spindle::net::as_bytes("anon"), unix_endpoint::path(path));
  got = co_await receiver.receive_from(buffer);
  outcomes.push_back({std::string(reinterpret_cast<const char*>(buffer.data()), got.size),
                      got.sender.is_unnamed() ? "unnamed" : got.sender.to_string(), got.truncated});
  // A reply to the abstract sender.
  co_await receiver.send_to(spindle::net::as_bytes("reply"), abstract_name);
  got = co_await named.receive_from(buffer);
  outcomes.push_back({std::string(reinterpret_cast<const char*>(buffer.data()), got.size),
                      got.sender.to_string(), got.truncated});
  co_return outcomes;
}

TEST_P(NetUnix, DatagramsCarryTheirSendersAddress) {
  spindle::runtime rt(options());
  const std::string path = unix_test_path("datagram");
  ::unlink(path.c_str());
  const auto abstract_name = unix_endpoint::abstract("spindle-dgram-" + std::to_string(::getpid()));
  const auto outcomes = join_bounded(rt.spawn(unix_datagram_exchange(path, abstract_name)), 30s);
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[0].text, "from abs");
  EXPECT_TRUE(outcomes[0].truncated);
  EXPECT_EQ(outcomes[0].sender, abstract_name.to_string());
  EXPECT_EQ(outcomes[1].text, "anon");
  EXPECT_FALSE(outcomes[1].truncated);
  EXPECT_EQ(outcomes[1].sender, "unnamed");
  EXPECT_EQ(outcomes[2].text, "reply");
  EXPECT_EQ(outcomes[2].sender, path);
  EXPECT_FALSE(unix_path_exists(path));  // the receiver unlinked its path when it went
}

task<std::string> unix_pairs() {
  auto [a, b] = unix_stream::pair();
  const std::string_view first_piece = "ab", second_piece = "cd";
  const std::span<const std::byte> pieces[2] = {spindle::net::as_bytes(first_piece),
                                               spindle::net::as_bytes(second_piece)};
  co_await a.write_all(spindle::net::buffer_list(pieces));
  std::array<std::byte, 4> buffer;
  co_await b.read_exact(buffer);
  auto [x, y] = unix_datagram::pair();
  co_await x.send(spindle::net::as_bytes("dg"));
  std::array<std::byte, 4> datagram;
  const auto got = co_await y.receive_from(datagram);
  co_return std::string(reinterpret_cast<const char*>(buffer.data()), buffer.size()) +
      std::string(reinterpret_cast<const char*>(datagram.data()), got.size);
}

TEST_P(NetUnix, PairsAreConnected) {
  spindle::runtime rt(options());
  EXPECT_EQ(join_bounded(rt.spawn(unix_pairs()), 30s), "abcddg");
}

TEST_P(NetUnix, LeavesNoDescriptorBehind) {
  const int before = spindle::testing::open_descriptor_count();
  {
    spindle::runtime rt(options());
    const std::string path = unix_test_path("fds");
    ::unlink(path.c_str());
    auto listener = unix_listener::bind(unix_endpoint::path(path));
    EXPECT_EQ(join_bounded(rt.spawn(unix_echo_once(listener, unix_endpoint::path(path))), 30s),
              "ping over unix");
    EXPECT_EQ(join_bounded(rt.spawn(unix_pairs()), 30s), "abcddg");
  }
  EXPECT_EQ(spindle::testing::open_descriptor_count(), before);
}

}  // namespace
