#include "work_chorus.h"

#include <ATen/core/jit_type.h>

#include "chorus/error.h"

namespace chorus::torch {

WorkChorus::WorkChorus(int rank, ::c10d::OpType type, std::string call, Staging staging,
                       std::vector<at::Tensor> outputs, int source_rank)
    : ::c10d::Work(rank, type),
      call_(std::move(call)),
      staging_(std::move(staging)),
      outputs_(std::move(outputs)),
      source_rank_(source_rank) {}

void WorkChorus::attach(std::vector<chorus::Work> works) {
  CHORUS_CHECK(!attached(), call_, " was attached twice");
  works_ = std::move(works);
  attached_.store(true, std::memory_order_release);
}

void WorkChorus::refuse(std::exception_ptr error) {
  attach({});
  complete(std::move(error));
}

void WorkChorus::ensure_attached() {
  if (!attached() && issue_now) issue_now();
  TORCH_CHECK(attached(), "chorus backend: ", call_,
              " is part of a batch (batch_isend_irecv) that has not been issued yet");
}

bool WorkChorus::chorus_done() const {
  if (!attached()) return false;
  for (const auto& w : works_)
    if (!w.test()) return false;
  return true;
}

bool WorkChorus::isCompleted() {
  if (!chorus_done()) return false;
  settle();  // every operation has finished: this returns at once
  return true;
}

bool WorkChorus::isSuccess() const {
  std::lock_guard lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr WorkChorus::exception() const {
  std::lock_guard lock(mutex_);
  return exception_;
}

std::vector<at::Tensor> WorkChorus::result() { return outputs_; }

int WorkChorus::sourceRank() const {
  CHORUS_ARG_CHECK(source_rank_ >= 0 || source_rank_ == kFromAnySource, call_,
                   ": sourceRank() is only defined for a recv");
  if (source_rank_ >= 0) return source_rank_;
  const int source = attached() && works_.size() == 1 ? works_.front().source() : -1;
  CHORUS_ARG_CHECK(source >= 0, call_,
                   ": the rank of a receive from any source is known once it has completed "
                   "(wait() first)");
  return source;
}

void WorkChorus::settle() {
  ensure_attached();
  // Every operation must have finished before the buffers go, even after one failed (the later
  // ones then fail fast: the communicator is unusable).
  std::exception_ptr first;
  for (auto& w : works_) {
    try {
      w.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  complete(first);
}

bool WorkChorus::wait(std::chrono::milliseconds timeout) {
  ensure_attached();
  if (timeout != kNoTimeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto& w : works_) {
      bool done = false;
      try {
        done = w.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(
            std::max(deadline - std::chrono::steady_clock::now(),
                     std::chrono::steady_clock::duration::zero())));
      } catch (...) {
        done = true;  // failed: settle() collects the error
      }
      TORCH_CHECK(done, "chorus backend: ", call_, " did not complete within ", timeout.count(),
                  " ms (the timeout given to wait()); the operation goes on");
    }
  }
  settle();
  std::lock_guard lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void WorkChorus::complete(std::exception_ptr error) {
  std::call_once(completed_once_, [&] {
    if (!error) {
      try {
        staging_.copy_back();
      } catch (...) {
        error = std::current_exception();
      }
    }
    staging_.release();
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard lock(mutex_);
      completed_ = true;
      exception_ = error;
      future = future_;
    }
    cv_.notify_all();
    // Outside the lock: marking a Future runs its callbacks (DDP's) on this thread.
    if (future) {
      if (error)
        future->setError(error);
      else
        future->markCompleted(c10::IValue(outputs_));
    }
  });
}

c10::intrusive_ptr<c10::ivalue::Future> WorkChorus::getFuture() {
  ensure_attached();
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool completed = false;
  {
    std::lock_guard lock(mutex_);
    if (future_) return future_;
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
    future = future_;
    completed = completed_;
  }
  // complete() has run and saw no Future: mark it here; otherwise complete() will.
  if (completed) {
    std::exception_ptr error = exception();
    if (error)
      future->setError(error);
    else
      future->markCompleted(c10::IValue(outputs_));
  } else if (on_future) {
    on_future(c10::intrusive_ptr<WorkChorus>::reclaim_copy(this));
  } else {
    settle();
  }
  return future;
}

// ---- Completer ---------------------------------------------------------------------------------

Completer::~Completer() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Completer::add(c10::intrusive_ptr<WorkChorus> work) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(work));
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  cv_.notify_one();
}

void Completer::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;
    c10::intrusive_ptr<WorkChorus> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    work->settle();  // marks the Future, running its callbacks here
    work.reset();
    lock.lock();
  }
}

}  // namespace chorus::torch
