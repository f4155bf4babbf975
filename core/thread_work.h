// ThreadWork: a core::Work that runs its operation on a thread of its own and waits on the wall
// clock. Used by the transports whose endpoints are real threads (loopback, ZeroMQ).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/transport.h"

namespace narrows::core {

class ThreadWork : public Work {
 public:
  explicit ThreadWork(std::function<Status()> fn) {
    thread_ = std::thread([this, fn = std::move(fn)] {
      Status s = fn();
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(s);
      done_ = true;
      cv_.notify_all();
    });
  }
  ~ThreadWork() override { thread_.join(); }
  Status Wait(double timeout_s) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(std::min(timeout_s, 1e6)), [&] { return done_; })) {
      return Status::Timeout("operation not finished within " + std::to_string(timeout_s) + " s");
    }
    return status_;
  }
  bool Done() override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
  std::thread thread_;
};

}  // namespace narrows::core
