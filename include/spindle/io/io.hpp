// spindle::io: the I/O module's umbrella header.
//   io_wait.hpp  - co_await io::submit_and_wait(operation): one reactor operation in a task
//   file.hpp     - io::file: positioned reads/writes, fsync/fdatasync, close
//   signals.hpp  - io::signal_set: POSIX signals as awaitable events (signalfd), block_signals
#pragma once

#include "spindle/io/io_wait.hpp"
#include "spindle/io/directory.hpp"
#include "spindle/io/file.hpp"
#include "spindle/io/signals.hpp"
