// chorus::parallel — the guard of gradient accumulation, one for every data-parallel wrapper:
//
//   { auto quiet = ddp.no_sync();  model.loss(x, y).backward(); }   // accumulates, no reduction
//
// While a NoSync lives, the wrapper that made it (DistributedDataParallel, ZeroOptimizer) does
// not reduce in backward; each wrapper says what that means for it. Guards nest; a moved-from
// guard releases nothing.
#pragma once

namespace chorus::parallel {

class DistributedDataParallel;
class ZeroOptimizer;

class NoSync {
 public:
  ~NoSync();
  NoSync(NoSync&& other) noexcept;
  NoSync(const NoSync&) = delete;
  NoSync& operator=(const NoSync&) = delete;
  NoSync& operator=(NoSync&&) = delete;

 private:
  friend class DistributedDataParallel;
  friend class ZeroOptimizer;
  explicit NoSync(int* depth);  // the wrapper's count of live guards
  int* depth_;
};

}  // namespace chorus::parallel
