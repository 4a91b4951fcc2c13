// The sync module: primitives for tasks that wait without blocking their executor.
// Every waiting operation is a cancellable wait (task/spawned_task.hpp, S3) following the
// shared protocol in sync/wait_queue.hpp; design notes in docs/design/sync.md.
#pragma once

#include "spindle/sync/broadcast.hpp"
#include "spindle/sync/channel.hpp"
#include "spindle/sync/event.hpp"
#include "spindle/sync/mutex.hpp"
#include "spindle/sync/oneshot.hpp"
#include "spindle/sync/semaphore.hpp"
#include "spindle/sync/wait_group.hpp"
#include "spindle/sync/wait_queue.hpp"
