// Task records: see include/spindle/task/task_record.hpp.
#include "spindle/task/task_record.hpp"

#include <cstdio>
#include <cstring>

#include "spindle/core/reactor.hpp"

namespace spindle {

const char* to_string(task_state state) noexcept {
  switch (state) {
    case task_state::scheduled: return "scheduled";
    case task_state::running: return "running";
    case task_state::suspended: return "suspended";
    case task_state::completing: return "completing";
    case task_state::unrecorded: return "unrecorded";
  }
  return "unknown";
}

const char* to_string(wait_kind kind) noexcept {
  switch (kind) {
    case wait_kind::none: return "unknown";
    case wait_kind::yield: return "yield";
    case wait_kind::channel_receive: return "channel receive";
    case wait_kind::channel_send: return "channel send";
    case wait_kind::mutex: return "mutex";
    case wait_kind::semaphore: return "semaphore";
    case wait_kind::event: return "event";
    case wait_kind::oneshot: return "oneshot";
    case wait_kind::wait_group: return "wait_group";
    case wait_kind::join: return "join";
    case wait_kind::join_set: return "join_set";
    case wait_kind::named: return "named";
    case wait_kind::slot: return "task_slot";
    case wait_kind::sleep: return "sleep";
    case wait_kind::io: return "io";
    case wait_kind::turnstile: return "turnstile";
    case wait_kind::ask: return "ask";
  }
  return "unknown";
}

namespace {

const char* ordinal_suffix(std::uint64_t n) noexcept {
  if (n % 100 >= 11 && n % 100 <= 13) return "th";
  switch (n % 10) {
    case 1: return "st";
    case 2: return "nd";
    case 3: return "rd";
    default: return "th";
  }
}

const char* io_verb(std::uint64_t opcode) noexcept {
  switch (core::io_opcode(opcode)) {
    case core::io_opcode::read: return "read";
    case core::io_opcode::write: return "write";
    case core::io_opcode::recv: return "recv";
    case core::io_opcode::send: return "send";
    case core::io_opcode::recvmsg: return "recvmsg";
    case core::io_opcode::sendmsg: return "sendmsg";
    case core::io_opcode::accept: return "accept";
    case core::io_opcode::connect: return "connect";
    case core::io_opcode::fsync: return "fsync";
    case core::io_opcode::poll: return "poll";
    case core::io_opcode::close: return "close";
    case core::io_opcode::statx: return "statx";
    case core::io_opcode::writev: return "writev";
  }
  return "io";
}

}  // namespace

std::size_t describe_wait(const wait_descriptor& what, char* out, std::size_t capacity) noexcept {
  if (capacity == 0) return 0;
  int n = 0;
  const auto queued = [&](const char* noun, const char* verb) {
    if (what.number != 0) {
      return std::snprintf(out, capacity, "%s#%llu%s%s (queued %llu%s)", noun,
                           static_cast<unsigned long long>(what.object), verb[0] ? " " : "", verb,
                           static_cast<unsigned long long>(what.number),
                           ordinal_suffix(what.number));
    }
    return std::snprintf(out, capacity, "%s#%llu%s%s", noun,
                         static_cast<unsigned long long>(what.object), verb[0] ? " " : "", verb);
  };
  switch (what.kind) {
    case wait_kind::none: n = std::snprintf(out, capacity, "%s", ""); break;
    case wait_kind::yield: n = std::snprintf(out, capacity, "yield"); break;
    case wait_kind::channel_receive:
      n = std::snprintf(out, capacity, "channel#%llu receive",
                        static_cast<unsigned long long>(what.object));
      break;
    case wait_kind::channel_send:
      n = std::snprintf(out, capacity, "channel#%llu send",
                        static_cast<unsigned long long>(what.object));
      break;
    case wait_kind::mutex: n = queued("mutex", ""); break;
    case wait_kind::semaphore: n = queued("semaphore", ""); break;
    // Everybody waiting on these is woken together: no position worth showing.
    case wait_kind::event:
    case wait_kind::oneshot:
    case wait_kind::wait_group:
      n = std::snprintf(out, capacity, "%s#%llu", to_string(what.kind),
                        static_cast<unsigned long long>(what.object));
      break;
    case wait_kind::join:
      n = std::snprintf(out, capacity, "join task %u.%u", unsigned(what.object >> 32),
                        unsigned(what.object & 0xffffffffu));
      break;
    case wait_kind::join_set: n = std::snprintf(out, capacity, "join_set next"); break;
    case wait_kind::named: n = std::snprintf(out, capacity, "named tasks to finish"); break;
    case wait_kind::slot: n = std::snprintf(out, capacity, "task_slot#%llu",
                                            static_cast<unsigned long long>(what.object));
      break;
    case wait_kind::sleep: n = std::snprintf(out, capacity, "sleep"); break;
    case wait_kind::io:
      n = std::snprintf(out, capacity, "%s fd %lld", io_verb(what.number),
                        static_cast<long long>(std::int64_t(what.object)));
      break;
    case wait_kind::turnstile: n = std::snprintf(out, capacity, "turnstile"); break;
    case wait_kind::ask:
      n = std::snprintf(out, capacity, "ask actor#%llu",
                        static_cast<unsigned long long>(what.object));
      break;
  }
  if (n < 0) {
    out[0] = '\0';
    return 0;
  }
  return std::size_t(n) < capacity ? std::size_t(n) : capacity - 1;
}

std::size_t describe_wait(const task_info& task, char* out, std::size_t capacity) noexcept {
  if (task.waiting_on.kind != wait_kind::sleep || capacity == 0) {
    return describe_wait(task.waiting_on, out, capacity);
  }
  // Time left, measured by the snapshot against the clock the deadline is on (a reading taken
  // while it scanned, so a little early for the records it read later).
  const int n = task.sleep_left_ns > 0
                    ? std::snprintf(out, capacity, "sleep, %.3f ms left",
                                    double(task.sleep_left_ns) / 1e6)
                    : std::snprintf(out, capacity, "sleep, due");
  if (n < 0) {
    out[0] = '\0';
    return 0;
  }
  return std::size_t(n) < capacity ? std::size_t(n) : capacity - 1;
}

namespace detail {

namespace {
// relaxed: ids only need to be distinct.
std::atomic<std::uint32_t> next_object_id{1};
}  // namespace

std::uint32_t lazy_object_id::assign() const noexcept {
  const std::uint32_t mine = next_object_id.fetch_add(1, std::memory_order_relaxed);
  std::uint32_t expected = 0;
  // relaxed: the id carries no data; whoever wins, everybody then reads the winner.
  if (id_.compare_exchange_strong(expected, mine, std::memory_order_relaxed)) return mine;
  return expected;
}

void task_record::set_name(std::string_view name) noexcept {
  if (name.size() > task_name_capacity) {
    name = name.substr(0, task_name_capacity);
    // Do not cut a UTF-8 sequence: drop continuation bytes and the lead byte they follow.
    while (!name.empty() && (static_cast<unsigned char>(name.back()) & 0xC0) == 0x80) {
      name.remove_suffix(1);
    }
    if (!name.empty() && (static_cast<unsigned char>(name.back()) & 0x80) != 0) name.remove_suffix(1);
  }
  constexpr std::size_t words = std::size(decltype(name_words){});
  char buffer[words * 8] = {};
  std::memcpy(buffer, name.data(), name.size());
  const std::uint32_t sequence = name_sequence.load(std::memory_order_relaxed);
  // relaxed + release fence: the odd value is visible before any new word (seqlock writer).
  name_sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t i = 0; i < words; ++i) {
    std::uint64_t word;
    std::memcpy(&word, buffer + i * 8, 8);
    name_words[i].store(word, std::memory_order_relaxed);
  }
  // release: the words are visible before the even value.
  name_sequence.store(sequence + 2, std::memory_order_release);
}

bool task_record::read_name(char (&out)[task_name_capacity + 1]) const noexcept {
  constexpr std::size_t words = std::size(decltype(name_words){});
  // acquire: pairs with the writer's final release store.
  const std::uint32_t before = name_sequence.load(std::memory_order_acquire);
  if ((before & 1) != 0) return false;
  char buffer[words * 8];
  for (std::size_t i = 0; i < words; ++i) {
    // relaxed: validated by the sequence re-read below.
    const std::uint64_t word = name_words[i].load(std::memory_order_relaxed);
    std::memcpy(buffer + i * 8, &word, 8);
  }
  // acquire: the word loads happen before the re-read.
  std::atomic_thread_fence(std::memory_order_acquire);
  if (name_sequence.load(std::memory_order_relaxed) != before) return false;
  static_assert(sizeof(buffer) == task_name_capacity + 1);
  buffer[task_name_capacity] = '\0';
  std::memcpy(out, buffer, sizeof(buffer));
  return true;
}

}  // namespace detail
}  // namespace spindle
