// net::endpoint: parsing (and rejecting), formatting, native conversions, equality.
#include <arpa/inet.h>
#include <sys/un.h>

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

#include "spindle/core/errors.hpp"
#include "spindle/net/net.hpp"

namespace {

using spindle::net::endpoint;

TEST(Endpoint, ParsesIPv4) {
  endpoint e("127.0.0.1", 8080);
  EXPECT_EQ(e.family(), AF_INET);
  EXPECT_EQ(e.port(), 8080);
  EXPECT_EQ(e.native_length(), socklen_t(sizeof(sockaddr_in)));
  EXPECT_EQ(e.to_string(), "127.0.0.1:8080");
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(e.native());
  EXPECT_EQ(v4->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  EXPECT_EQ(v4->sin_port, htons(8080));

  EXPECT_EQ(endpoint("0.0.0.0", 0).to_string(), "0.0.0.0:0");
  EXPECT_EQ(endpoint("255.255.255.255", 65535).to_string(), "255.255.255.255:65535");
  EXPECT_EQ(endpoint("10.1.2.3", 1).port(), 1);
}

TEST(Endpoint, ParsesIPv6) {
  endpoint e("::1", 443);
  EXPECT_EQ(e.family(), AF_INET6);
  EXPECT_EQ(e.port(), 443);
  EXPECT_EQ(e.native_length(), socklen_t(sizeof(sockaddr_in6)));
  EXPECT_EQ(e.to_string(), "[::1]:443");
  EXPECT_EQ(endpoint("::", 0).to_string(), "[::]:0");
  EXPECT_EQ(endpoint("fe80::1:2", 7).to_string(), "[fe80::1:2]:7");
  EXPECT_EQ(endpoint("2001:DB8:0:0:0:0:0:1", 9).to_string(), "[2001:db8::1]:9");
  EXPECT_EQ(endpoint("::ffff:127.0.0.1", 5).to_string(), "[::ffff:127.0.0.1]:5");
}

TEST(Endpoint, NamedConstructors) {
  EXPECT_EQ(endpoint::loopback_v4(99).to_string(), "127.0.0.1:99");
  EXPECT_EQ(endpoint::any_v4(0).to_string(), "0.0.0.0:0");
  EXPECT_EQ(endpoint::loopback_v4(1234), endpoint("127.0.0.1", 1234));
  EXPECT_EQ(endpoint::any_v4(5), endpoint("0.0.0.0", 5));
}

TEST(Endpoint, RejectsAnythingButANumericAddress) {
  const std::string_view bad[] = {
      "",
      " ",
      "localhost",
      "example.com",
      "127.0.0.1 ",
      " 127.0.0.1",
      "127.0.0.1:80",
      "127.0.0",
      "127.0.0.1.1",
      "256.0.0.1",
      "1.2.3.-4",
      "0x7f.0.0.1",
      "::g",
      ":::",
      "1::2::3",
      "[::1]",
      "[::1]:80",
      "fe80::1%lo",
      "12345::",
      std::string_view("127.0.0.1\0junk", 14),
      std::string_view("::1\0", 4),
      "0000:0000:0000:0000:0000:0000:0000:0000:0000",  // nine groups
  };
  for (std::string_view text : bad) {
    EXPECT_THROW(endpoint(text, 80), std::invalid_argument) << "\"" << text << "\"";
  }
  std::string long_text(4096, '1');
  EXPECT_THROW(endpoint(long_text, 1), std::invalid_argument);
}

TEST(Endpoint, DefaultIsUnspecified) {
  endpoint e;
  EXPECT_EQ(e.family(), AF_UNSPEC);
  EXPECT_EQ(e.port(), 0);
  EXPECT_EQ(e.native_length(), socklen_t(0));
  EXPECT_EQ(e.to_string(), "");
  EXPECT_EQ(e, endpoint());
  EXPECT_FALSE(e == endpoint::any_v4(0));
}

TEST(Endpoint, FromNativeRoundTripsAndValidates) {
  for (const endpoint& e : {endpoint("192.168.1.20", 5353), endpoint("::1", 1),
                            endpoint("2001:db8::7", 65535)}) {
    endpoint copy = endpoint::from_native(e.native(), e.native_length());
    EXPECT_EQ(copy, e);
    EXPECT_EQ(copy.to_string(), e.to_string());
    EXPECT_EQ(copy.native_length(), e.native_length());
  }
  // A longer length (a whole sockaddr_storage, as recvmsg may report) is fine.
  endpoint v6("::1", 2);
  sockaddr_storage storage{};
  std::memcpy(&storage, v6.native(), v6.native_length());
  EXPECT_EQ(endpoint::from_native(reinterpret_cast<sockaddr*>(&storage), sizeof storage), v6);

  EXPECT_THROW(endpoint::from_native(nullptr, 16), std::invalid_argument);
  endpoint v4("1.2.3.4", 5);
  EXPECT_THROW(endpoint::from_native(v4.native(), v4.native_length() - 1), std::invalid_argument);
  EXPECT_THROW(endpoint::from_native(v4.native(), 0), std::invalid_argument);
  EXPECT_THROW(endpoint::from_native(v6.native(), sizeof(sockaddr_in)), std::invalid_argument);
  sockaddr_un local{};
  local.sun_family = AF_UNIX;
  EXPECT_THROW(endpoint::from_native(reinterpret_cast<sockaddr*>(&local), sizeof local),
               std::invalid_argument);
}

TEST(Endpoint, Equality) {
  EXPECT_EQ(endpoint("127.0.0.1", 1), endpoint("127.0.0.1", 1));
  EXPECT_FALSE(endpoint("127.0.0.1", 1) == endpoint("127.0.0.1", 2));
  EXPECT_FALSE(endpoint("127.0.0.1", 1) == endpoint("127.0.0.2", 1));
  EXPECT_FALSE(endpoint("::1", 1) == endpoint("127.0.0.1", 1));
  EXPECT_FALSE(endpoint("::ffff:127.0.0.1", 1) == endpoint("127.0.0.1", 1));
  EXPECT_EQ(endpoint("::1", 1), endpoint("0:0:0:0:0:0:0:1", 1));
}

}  // namespace

// issue 14, item 13: a malformed argument is a usage_error in net as everywhere else
// (docs/design/errors.md); usage_error is a std::invalid_argument, so older catches still work.
TEST(ErrorVocabulary, NetInvalidArgumentsAreUsageErrors) {
  using spindle::net::endpoint;
  EXPECT_THROW(endpoint("localhost", 80), spindle::usage_error);
  EXPECT_THROW(endpoint::from_native(nullptr, 16), spindle::usage_error);
  EXPECT_THROW(endpoint("localhost", 80), std::invalid_argument);
}
