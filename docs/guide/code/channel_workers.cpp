// One producer, four consumers, a bounded channel; what close() means.
#include <spindle/spindle.hpp>

#include <optional>
#include <string>
#include <utility>

struct job {
  int id;
  std::string payload;
};

spindle::task<long> worker(spindle::channel<job>& jobs) {
  long done = 0;
  for (;;) {
    std::optional<job> next = co_await jobs.receive();
    if (!next) break;  // closed and drained: no more jobs
    done += next->id;
  }
  co_return done;
}

spindle::task<bool> demo() {
  spindle::channel<job> jobs(8);
  spindle::join_set<long> workers;
  for (int w = 0; w < 4; ++w) workers.spawn(worker(jobs));

  for (int i = 1; i <= 1000; ++i) {
    job next{i, "job " + std::to_string(i)};  // build it in a named local ...
    co_await jobs.send(std::move(next));      // ... and move it in (see pitfalls.md)
  }
  jobs.close();  // the workers drain what is queued, then see the end

  long total = 0;
  for (;;) {
    std::optional<long> done = co_await workers.next();
    if (!done) break;
    total += *done;
  }

  // After close(): try_send reports it, send throws channel_closed.
  job late{0, "late"};
  const spindle::channel_send_status status = jobs.try_send(std::move(late));
  bool threw = false;
  try {
    job later{0, "later"};
    co_await jobs.send(std::move(later));
  } catch (const spindle::channel_closed&) {
    threw = true;
  }
  co_return total == 500500 && status.is_closed() && threw;
}

int main() {
  spindle::runtime rt;
  return rt.block_on(demo()) ? 0 : 1;
}
