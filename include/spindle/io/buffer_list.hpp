// The buffers of a vectored write, e.g. a std::array or std::vector of std::span<const byte>:
// one type for sockets (net::tcp_stream::write_vectored, write_all; net/net.hpp) and files
// (io::file::write_vectored_at, write_all_at; io/file.hpp). The list and the bytes it names are
// the caller's and must stay valid until the call's task completes; empty buffers are skipped.
#pragma once

#include <cstddef>
#include <span>

namespace spindle::io {

using buffer_list = std::span<const std::span<const std::byte>>;

}  // namespace spindle::io
