// Buffer lists in iovec batches (src/io/buffer_vectors.hpp).
#include "io/buffer_vectors.hpp"

#include <limits.h>

#include <algorithm>

namespace spindle::io::detail {

void fill_vectors(buffer_list buffers, vector_position at, std::vector<iovec>& vectors) {
  vectors.clear();
  std::size_t total = 0;
  for (std::size_t i = at.index; i < buffers.size() && vectors.size() < std::size_t(IOV_MAX); ++i) {
    const std::size_t skip = i == at.index ? at.offset : 0;
    std::size_t length = buffers[i].size() - skip;
    if (length == 0) continue;
    length = std::min(length, max_batch_bytes - total);
    vectors.push_back(iovec{const_cast<std::byte*>(buffers[i].data() + skip), length});
    total += length;
    if (total == max_batch_bytes) break;
  }
}

void advance(buffer_list buffers, vector_position& at, std::size_t written) {
  while (at.index < buffers.size()) {
    const std::size_t left = buffers[at.index].size() - at.offset;
    if (written < left) {
      at.offset += written;
      return;
    }
    written -= left;
    ++at.index;
    at.offset = 0;
  }
}

}  // namespace spindle::io::detail
