// Spawning from main() and from inside a task; joining both ways.
#include <spindle/spindle.hpp>

#include <string>
#include <utility>

spindle::task<int> word_length(std::string word) {  // by value: the task owns its copy
  co_return static_cast<int>(word.size());
}

spindle::task<int> total_length() {
  // Inside a task: spindle::spawn puts the child on this executor; co_await joins it.
  auto a = spindle::spawn(word_length("fork"));
  auto b = spindle::spawn(word_length("join"));
  const int first = co_await std::move(a);
  const int second = co_await std::move(b);
  co_return first + second;
}

int main() {
  spindle::runtime_options options;
  options.workers = 2;
  spindle::runtime rt(options);

  // From a plain thread: spawn returns a join_handle; join() blocks this thread.
  auto handle = rt.spawn(total_length());
  const int total = handle.join();

  // A plain callable is spawned as a task too.
  auto answer = rt.spawn([] { return 6 * 7; });

  // block_on(t) is spawn(t).join().
  const int again = rt.block_on(total_length());
  return total == 8 && again == 8 && answer.join() == 42 ? 0 : 1;
}
