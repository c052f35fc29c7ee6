#include "common/bucket_readiness.h"

#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/tensor/autograd.h"

namespace chorus::parallel {

BucketReadiness::BucketReadiness(std::string who, std::vector<std::string> names,
                                 std::vector<size_t> bucket_of, size_t buckets,
                                 std::string unused_note, Owner owner,
                                 std::function<bool(const std::string&)> quiet)
    : who_(std::move(who)),
      unused_note_(std::move(unused_note)),
      names_(std::move(names)),
      bucket_of_(std::move(bucket_of)),
      size_(buckets, 0),
      owner_(std::move(owner)),
      quiet_(std::move(quiet)),
      pending_(buckets, 0),
      seen_(names_.size(), 0),
      next_launch_(buckets) {
  CHORUS_CHECK(names_.size() == bucket_of_.size(), who_, ": ", names_.size(), " names for ",
               bucket_of_.size(), " parameters");
  for (size_t b : bucket_of_) {
    CHORUS_CHECK(b < buckets, who_, ": bucket ", b, " of ", buckets);
    ++size_[b];
  }
}

void BucketReadiness::enter() {
  if (tensor::backward_id() == backward_) return;
  if (owner_.open) owner_.open();
  backward_ = tensor::backward_id();
  pending_ = size_;
  seen_.assign(seen_.size(), 0);
  next_launch_ = 0;
  tensor::queue_backward_callback([this] { finish(); });
}

bool BucketReadiness::ready(size_t p) {
  if (seen_[p]) return false;
  seen_[p] = 1;
  const size_t b = bucket_of_[p];
  if (--pending_[b] == 0) {
    if (owner_.final) owner_.final(b);
    launch_ready();
  }
  return true;
}

void BucketReadiness::launch_ready() {
  while (next_launch_ < pending_.size() && pending_[next_launch_] == 0)
    owner_.launch(next_launch_++);
}

void BucketReadiness::finish() {
  if (next_launch_ < pending_.size()) {
    for (size_t p = 0; p < seen_.size(); ++p) {
      if (seen_[p]) continue;
      if (unused_.insert(names_[p]).second && !(quiet_ && quiet_(names_[p])))
        CHORUS_WARN(kLogPar, who_, ": parameter '", names_[p],
                    "' got no gradient in this backward; ", unused_note_, " (reported once)");
      if (owner_.unused) owner_.unused(p);
      ready(p);
    }
  }
  CHORUS_CHECK(next_launch_ == pending_.size(), who_, ": ", pending_.size() - next_launch_,
               " buckets never started");
  if (owner_.finished) owner_.finished();
}

}  // namespace chorus::parallel
