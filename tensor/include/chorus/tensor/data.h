// chorus::tensor — a byte-level corpus and a deterministic, seekable batch sampler.
//
// The tokenizer is the identity on bytes (vocabulary 256). batch(step) is a pure function of
// (seed, step): row r starts at a Philox draw keyed by (seed, step, r), so training can resume
// at any step, and data-parallel ranks can take disjoint rows of the same global batch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "chorus/tensor/tensor.h"

namespace chorus::tensor {

class ByteCorpus {
 public:
  explicit ByteCorpus(std::vector<uint8_t> bytes);
  // Reads a whole file (throws kSystem when it cannot).
  static ByteCorpus from_file(const std::string& path);
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  static constexpr int64_t kVocab = 256;

 private:
  std::vector<uint8_t> bytes_;
};

class BatchSampler {
 public:
  BatchSampler(const ByteCorpus& corpus, int64_t batch, int64_t context, uint64_t seed);
  // inputs (B, T) and targets (B, T) (inputs shifted by one), both i32.
  std::pair<Tensor, Tensor> batch(int64_t step) const;

 private:
  const ByteCorpus& corpus_;
  int64_t batch_, context_;
  uint64_t seed_;
};

}  // namespace chorus::tensor
