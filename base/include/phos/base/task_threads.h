// A few threads that run posted tasks in the order posted: blocking work (disk writes, requests to
// another node) taken off a thread that must not block, such as the HTTP server's event loop.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace phos {

class TaskThreads {
 public:
  explicit TaskThreads(int threads);
  // Runs the tasks already posted, then joins the threads. A task must not destroy its TaskThreads.
  ~TaskThreads();
  TaskThreads(const TaskThreads&) = delete;
  TaskThreads& operator=(const TaskThreads&) = delete;

  // Queues `task` for the next free thread. Thread-safe.
  void Post(std::function<void()> task);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace phos
