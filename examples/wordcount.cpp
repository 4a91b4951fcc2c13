// Word count over a directory tree (issue 16): an async read stage feeding a CPU-parallel count.
//
//   build/release/examples/spindle-example-wordcount DIR THREADS [files|bridge|naive|serial|walk]
//
// Prints `lines words bytes files` and the time. Every regular file under DIR (symbolic links are
// not followed) is counted as wc counts it: lines are '\n' bytes, words maximal runs of bytes
// that are not C-locale white space (space, \t, \n, \v, \f, \r), bytes all bytes.
//   files   (default) a walker task sends the paths of the files over a channel, 32 a batch;
//           for_each_concurrent opens, reads and counts up to 8 x THREADS batches at once on
//           whichever worker is free, while the walk goes on. On 2 cores, warm cache, about
//           0.65x the serial time (docs/design/fork-join.md).
//   walk    the tree walk alone, counting files (what the walk costs the other modes).
//   bridge  a reader task walks the tree with io::list_directory and reads files with
//           io::file into 256 KiB chunks (small files packed together) sent over a channel;
//           parallel_consume counts each chunk on whichever worker is free, at most 2 x THREADS
//           chunks in flight, while the reader goes on: reading overlaps counting.
//   naive   reads every file with io::file first, then parallel_reduce counts them.
//   serial  one thread, readdir + open/read/close, no runtime.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "spindle/spindle.hpp"

namespace {

struct counts {
  std::uint64_t lines = 0, words = 0, bytes = 0, files = 0;
  friend counts operator+(counts a, const counts& b) {
    return {a.lines + b.lines, a.words + b.words, a.bytes + b.bytes, a.files + b.files};
  }
};

constexpr std::array<bool, 256> space_table = [] {
  std::array<bool, 256> table{};
  for (unsigned char c : {' ', '\t', '\n', '\v', '\f', '\r'}) table[c] = true;
  return table;
}();

// Counts [data, data + size); `after_space`: whether the byte before it was white space (true
// at the start of a file).
counts count_bytes(const char* data, std::size_t size, bool after_space) {
  counts result;
  result.bytes = size;
  std::uint64_t lines = 0, words = 0;
  bool previous_space = after_space;
  for (std::size_t i = 0; i < size; ++i) {
    const auto c = static_cast<unsigned char>(data[i]);
    const bool space = space_table[c];
    lines += c == '\n';
    words += previous_space && !space;
    previous_space = space;
  }
  result.lines = lines;
  result.words = words;
  return result;
}

// --- serial: one thread, plain system calls ---------------------------------------------------
void count_serial(const std::string& directory, counts& total, std::vector<char>& buffer) {
  DIR* listing = ::opendir(directory.c_str());
  if (listing == nullptr) return;
  while (dirent* entry = ::readdir(listing)) {
    if (std::strcmp(entry->d_name, ".") == 0 || std::strcmp(entry->d_name, "..") == 0) continue;
    const std::string path = directory + "/" + entry->d_name;
    unsigned char type = entry->d_type;
    if (type == DT_UNKNOWN) {
      struct stat status{};
      if (::lstat(path.c_str(), &status) != 0) continue;
      type = S_ISDIR(status.st_mode) ? DT_DIR : S_ISREG(status.st_mode) ? DT_REG : DT_LNK;
    }
    if (type == DT_DIR) {
      count_serial(path, total, buffer);
    } else if (type == DT_REG) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      bool after_space = true;
      for (;;) {
        const ssize_t got = ::read(fd, buffer.data(), buffer.size());
        if (got <= 0) break;
        total = total + count_bytes(buffer.data(), std::size_t(got), after_space);
        after_space = space_table[static_cast<unsigned char>(buffer[std::size_t(got) - 1])];
      }
      ::close(fd);
      ++total.files;
    }
  }
  ::closedir(listing);
}

// --- the tree walk the spindle versions share -------------------------------------------------
// A directory and what it holds (nothing where it could not be read: skipped, as the serial walk
// skips it).
struct listing {
  std::string directory;
  std::vector<spindle::io::directory_entry> entries;
};

spindle::task<listing> list_one(std::string directory) {
  listing result{std::move(directory), {}};
  try {
    result.entries = co_await spindle::io::list_directory(result.directory);
  } catch (const std::system_error&) {
  }
  co_return result;
}

// Up to this many directories are listed at once. A listing runs on one of spindle's helper
// threads (io/directory.hpp) and is a round trip to it: one listing at a time made the walk
// alone take a third of the serial program's whole time (1172 directories under /usr/share/doc).
constexpr std::size_t listings_in_flight = 8;

// Calls on_file(path) (a task) for every regular file under `root`, in no set order.
template <class OnFile>
spindle::task<void> walk(std::string root, OnFile& on_file) {
  std::vector<std::string> waiting{std::move(root)};
  spindle::join_set<listing> listings;
  while (!waiting.empty() || !listings.empty()) {
    while (!waiting.empty() && listings.size() < listings_in_flight) {
      listings.spawn(list_one(std::move(waiting.back())));
      waiting.pop_back();
    }
    std::optional<listing> done = co_await listings.next();
    if (!done) continue;
    for (auto& entry : done->entries) {
      std::string path = done->directory + "/" + entry.name;
      auto kind = entry.kind;
      if (kind == spindle::io::file_kind::unknown) {
        const spindle::io::file_status status = co_await spindle::io::symlink_status(path);
        kind = status.kind;
      }
      if (kind == spindle::io::file_kind::directory) {
        waiting.push_back(std::move(path));
      } else if (kind == spindle::io::file_kind::regular) {
        co_await on_file(std::move(path));
      }
    }
  }
}

// Walks `root` into `out` through `on_file` (which sends what it gathers), sends what `on_file`
// still holds at the end (its take_rest()), and closes `out` whatever happens, so that the
// consumer's loop ends: on a failure too, which is then rethrown.
template <class OnFile, class Item>
spindle::task<void> walk_then_close(std::string root, OnFile& on_file,
                                    spindle::channel<Item>& out) {
  try {
    co_await walk(std::move(root), on_file);
    if (std::optional<Item> rest = on_file.take_rest()) {
      Item last = std::move(*rest);  // named: g++ 12 and co_await operands
      co_await out.send(std::move(last));
    }
  } catch (...) {
    out.close();
    throw;
  }
  out.close();
}

// --- naive: read everything, then parallel_reduce ---------------------------------------------
struct whole_file_reader {
  std::vector<std::string>* contents;
  spindle::task<void> operator()(std::string path) {
    spindle::io::file file;
    try {
      file = co_await spindle::io::file::open(std::move(path));
    } catch (const std::system_error&) {
      co_return;
    }
    std::string text(file.size(), '\0');  // the file as fstat saw it
    std::size_t have = 0;
    while (have < text.size()) {
      const std::size_t got = co_await file.read_at(
          std::as_writable_bytes(std::span(text.data() + have, text.size() - have)), have);
      if (got == 0) break;
      have += got;
    }
    text.resize(have);
    contents->push_back(std::move(text));
  }
};

spindle::task<counts> count_naive(std::string root) {
  std::vector<std::string> contents;
  whole_file_reader reader{&contents};
  const auto start = std::chrono::steady_clock::now();
  co_await walk(std::move(root), reader);
  if (std::getenv("WORDCOUNT_PHASES") != nullptr) {
    std::fprintf(stderr, "naive: reading took %.4f s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  co_return spindle::parallel_reduce(
      contents, counts{},
      [](const std::string& text) {
        counts c = count_bytes(text.data(), text.size(), true);
        c.files = 1;
        return c;
      },
      [](counts a, counts b) { return a + b; });
}

// The file opened for reading, or nullopt where it cannot be (skipped, as the serial walk skips it).
spindle::task<std::optional<spindle::io::file>> open_readable(std::string path) {
  try {
    co_return co_await spindle::io::file::open(std::move(path));
  } catch (const std::system_error&) {
    co_return std::nullopt;
  }
}

// --- bridge: a reader stage feeding parallel_consume ------------------------------------------
// A chunk of bytes read from one or more files: segment i is [start[i], start[i+1]) (the last
// one ends at size) and begins after white space when after_space[i] (a file's start) or after a
// non-space byte (a file continued from the previous chunk).
struct chunk {
  static constexpr std::size_t capacity = 256 * 1024;
  std::unique_ptr<char[]> bytes = std::make_unique_for_overwrite<char[]>(capacity);
  std::size_t size = 0;
  std::vector<std::size_t> start;
  std::vector<bool> after_space;
  std::uint64_t files = 0;  // files that end in this chunk
};

counts count_chunk(chunk piece) {
  counts result;
  for (std::size_t i = 0; i < piece.start.size(); ++i) {
    const std::size_t end = i + 1 < piece.start.size() ? piece.start[i + 1] : piece.size;
    result = result + count_bytes(piece.bytes.get() + piece.start[i], end - piece.start[i],
                                  piece.after_space[i]);
  }
  result.files = piece.files;
  return result;
}

struct chunk_reader {
  spindle::channel<chunk>* chunks;
  chunk current;
  spindle::task<void> operator()(std::string path) {
    std::optional<spindle::io::file> opened = co_await open_readable(std::move(path));
    if (!opened) co_return;
    spindle::io::file& file = *opened;
    const std::uint64_t size = file.size();
    std::uint64_t offset = 0;
    bool after_space = true;
    current.start.push_back(current.size);
    current.after_space.push_back(true);
    for (;;) {
      if (current.size == chunk::capacity) {  // full: hand it over, the file goes on in the next
        chunk full = std::exchange(current, chunk{});  // named: g++ 12 and co_await operands
        co_await chunks->send(std::move(full));
        current.start.push_back(0);
        current.after_space.push_back(after_space);
      }
      auto free_space = std::span(current.bytes.get() + current.size, chunk::capacity - current.size);
      const std::size_t got = co_await file.read_at(std::as_writable_bytes(free_space), offset);
      if (got == 0) break;
      current.size += got;
      offset += got;
      after_space = space_table[static_cast<unsigned char>(current.bytes[current.size - 1])];
      if (offset >= size && got < free_space.size()) break;  // the whole file, as fstat saw it
    }
    ++current.files;
  }
  // The last, partly filled chunk, if any.
  std::optional<chunk> take_rest() {
    if (current.size == 0 && current.files == 0) return std::nullopt;
    return std::move(current);
  }
};

spindle::task<void> read_tree(std::string root, spindle::channel<chunk>& chunks) {
  chunk_reader reader{&chunks, chunk{}};
  co_await walk_then_close(std::move(root), reader, chunks);
}

// --- files: the walk feeding for_each_concurrent, each file read and counted by one child ----
// Reading is what the serial program spends most of its time on (open, read, close: system
// calls a file), so the files themselves are the items: up to `in_flight` are opened, read and
// counted at once, on whichever worker is free, while the walk goes on.
struct file_counter {
  std::mutex lock;
  counts total;
};

// One file's counts (nothing for a file that cannot be opened). `buffer` holds `capacity` bytes.
spindle::task<counts> count_file(std::string path, char* buffer, std::size_t capacity) {
  std::optional<spindle::io::file> opened = co_await open_readable(std::move(path));
  if (!opened) co_return counts{};
  spindle::io::file& file = *opened;
  const std::uint64_t size = file.size();
  // Up to the file's size and a byte more (the end shows as a short read).
  const std::size_t wanted = std::size_t(std::min<std::uint64_t>(size + 1, capacity));
  counts result;
  std::uint64_t offset = 0;
  bool after_space = true;
  for (;;) {
    const std::size_t got =
        co_await file.read_at(std::as_writable_bytes(std::span(buffer, wanted)), offset);
    if (got == 0) break;
    result = result + count_bytes(buffer, got, after_space);
    after_space = space_table[static_cast<unsigned char>(buffer[got - 1])];
    offset += got;
    if (offset >= size && got < wanted) break;  // the whole file, as fstat saw it
  }
  result.files = 1;
  co_return result;
}

// A batch of paths is one item: a spawn and a channel send for every 32 files, not every file
// (most files here are small: the runtime's cost per item was a large part of the whole).
constexpr std::size_t paths_per_batch = 32;
using path_batch = std::vector<std::string>;

spindle::task<void> count_batch(path_batch paths, file_counter& counter) {
  // One buffer for the batch, not zeroed (make_unique_for_overwrite: a zeroed buffer wrote
  // every byte once more, and made the first version of this mode no faster than serial).
  constexpr std::size_t capacity = 256 * 1024;
  const auto buffer = std::make_unique_for_overwrite<char[]>(capacity);
  counts result;
  for (std::string& path : paths) {
    result = result + co_await count_file(std::move(path), buffer.get(), capacity);
  }
  std::lock_guard guard(counter.lock);
  counter.total = counter.total + result;
}

struct path_batcher {
  spindle::channel<path_batch>* batches;
  path_batch current;
  spindle::task<void> operator()(std::string path) {
    current.push_back(std::move(path));
    if (current.size() < paths_per_batch) co_return;
    path_batch full = std::exchange(current, path_batch{});  // named: g++ 12 and co_await operands
    co_await batches->send(std::move(full));
  }
  // The last, partly filled batch, if any.
  std::optional<path_batch> take_rest() {
    if (current.empty()) return std::nullopt;
    return std::move(current);
  }
};

spindle::task<void> walk_into(std::string root, spindle::channel<path_batch>& batches) {
  path_batcher batcher{&batches, {}};
  co_await walk_then_close(std::move(root), batcher, batches);
}

spindle::task<counts> count_files(std::string root, std::size_t in_flight) {
  spindle::channel<path_batch> batches(in_flight);
  file_counter counter;
  auto walker = spindle::spawn(walk_into(std::move(root), batches));
  co_await spindle::for_each_concurrent(batches, in_flight, [&counter](path_batch paths) {
    return count_batch(std::move(paths), counter);
  });
  co_await std::move(walker);
  co_return counter.total;
}

// --- walk: the tree walk alone (what the other modes' walk costs) -----------------------------
struct file_tally {
  std::uint64_t* files;
  spindle::task<void> operator()(std::string) {
    ++*files;
    co_return;
  }
};

spindle::task<counts> count_walk(std::string root) {
  counts result;
  file_tally tally{&result.files};
  co_await walk(std::move(root), tally);
  co_return result;
}

spindle::task<counts> count_bridge(std::string root, std::size_t in_flight) {
  spindle::channel<chunk> chunks(in_flight);
  auto reader = spindle::spawn(read_tree(std::move(root), chunks));
  const counts total = co_await spindle::parallel_consume(
      chunks, in_flight, counts{}, count_chunk, [](counts a, counts b) { return a + b; });
  co_await std::move(reader);
  co_return total;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR THREADS [files|bridge|naive|serial|walk]\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  const int threads = std::atoi(argv[2]);
  const std::string mode = argc > 3 ? argv[3] : "files";
  if (threads < 1 || (mode != "bridge" && mode != "files" && mode != "naive" && mode != "serial" &&
                      mode != "walk")) {
    std::fprintf(stderr, "usage: %s DIR THREADS [files|bridge|naive|serial|walk]\n", argv[0]);
    return 2;
  }
  counts total;
  double seconds = 0;
  if (mode == "serial") {
    const auto start = std::chrono::steady_clock::now();
    std::vector<char> buffer(256 * 1024);
    count_serial(root, total, buffer);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } else {
    spindle::runtime_options options;
    options.workers = std::uint32_t(threads);
    spindle::runtime rt(options);
    const auto start = std::chrono::steady_clock::now();
    total = mode == "walk"    ? rt.block_on(count_walk(root))
            : mode == "naive" ? rt.block_on(count_naive(root))
            : mode == "files" ? rt.block_on(count_files(root, 8 * std::size_t(threads)))
                              : rt.block_on(count_bridge(root, 2 * std::size_t(threads)));
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  std::printf("%llu %llu %llu %llu\n", static_cast<unsigned long long>(total.lines),
              static_cast<unsigned long long>(total.words),
              static_cast<unsigned long long>(total.bytes),
              static_cast<unsigned long long>(total.files));
  std::printf("%s %d threads: %.4f s\n", mode.c_str(), threads, seconds);
  return 0;
}
