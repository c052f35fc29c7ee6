// Internal: the bucket-ready protocol every data-parallel wrapper runs during backward (DDP,
// ZeRO's gradient flow): one place for the rule that makes every rank issue the same reductions
// in the same order.
//
// Parameters belong to buckets (DDP's flat buckets, ZeRO's buckets or units). Per backward (a
// "step"): the first gradient hook of a backward opens the step (the owner's open(), then the
// engine is asked to call finish() when backward ends); each final gradient counts its bucket
// down once; a bucket whose count reaches zero is final (the owner's final(bucket)), and final
// buckets launch strictly in bucket order (launch(bucket)): a bucket that is ready before an
// earlier one waits for it. finish() treats every parameter that got no gradient as ready
// (reported once per name through a warning naming the wrapper), so that every bucket launches
// on every rank, then calls the owner's finished().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace chorus::parallel {

class BucketReadiness {
 public:
  struct Owner {
    std::function<void()> open;                 // a new backward's first gradient
    std::function<void(size_t param)> unused;   // at finish, before an unused one counts
    std::function<void(size_t bucket)> final;   // every gradient of the bucket is final
    std::function<void(size_t bucket)> launch;  // in bucket order
    std::function<void()> finished;             // every bucket has launched
  };
  // bucket_of[p]: parameter p's bucket (< buckets); names for the warnings; `unused_note` ends
  // the warning about a parameter without a gradient; `quiet` names parameters expected to go
  // without one sometimes (no warning; unused() still lists them).
  BucketReadiness(std::string who, std::vector<std::string> names, std::vector<size_t> bucket_of,
                  size_t buckets, std::string unused_note, Owner owner,
                  std::function<bool(const std::string&)> quiet = nullptr);

  // Opens the step when this is a new backward's first hook (owner.open, then finish() queued
  // on the engine).
  void enter();
  // Parameter p's gradient is final: counts its bucket down (once per step) and launches what
  // is ready. Returns false when p was already counted in this step.
  bool ready(size_t p);
  // The end of backward (queued by enter()).
  void finish();

  // Parameters that got no gradient in some backward so far.
  const std::set<std::string>& unused() const { return unused_; }

 private:
  void launch_ready();

  std::string who_, unused_note_;
  std::vector<std::string> names_;
  std::vector<size_t> bucket_of_;
  std::vector<int> size_;  // per bucket: its parameters
  Owner owner_;
  std::function<bool(const std::string&)> quiet_;
  uint64_t backward_ = 0;     // tensor::backward_id() of the open step's backward
  std::vector<int> pending_;  // per bucket: gradients still to come
  std::vector<char> seen_;    // per parameter: counted in this step
  size_t next_launch_ = 0;    // buckets [0, next_launch_) have launched
  std::set<std::string> unused_;
};

}  // namespace chorus::parallel
