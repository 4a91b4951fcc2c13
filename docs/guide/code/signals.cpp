// POSIX signals as awaitable events (a signalfd read through the reactor).
#include <spindle/spindle.hpp>

#include <signal.h>
#include <unistd.h>

spindle::task<int> wait_for_signal() {
  spindle::io::signal_set signals{SIGUSR1, SIGTERM};
  ::kill(::getpid(), SIGUSR1);  // process-directed: reaches the signalfd
  co_return co_await signals.wait();
}

int main() {
  // First, before any thread exists: every thread must block the signals.
  spindle::io::block_signals({SIGUSR1, SIGTERM});
  spindle::runtime rt;
  return rt.block_on(wait_for_signal()) == SIGUSR1 ? 0 : 1;
}
