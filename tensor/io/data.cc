#include "chorus/tensor/data.h"

#include <fstream>
#include <iterator>

#include "chorus/error.h"
#include "chorus/tensor/random.h"

namespace chorus::tensor {

ByteCorpus::ByteCorpus(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}

ByteCorpus ByteCorpus::from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_system_error("open " + path, errno);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return ByteCorpus(std::move(bytes));
}

BatchSampler::BatchSampler(const ByteCorpus& corpus, int64_t batch, int64_t context, uint64_t seed)
    : corpus_(corpus), batch_(batch), context_(context), seed_(seed) {
  CHORUS_ARG_CHECK(batch > 0 && context > 0, "BatchSampler: batch and context must be positive");
  CHORUS_ARG_CHECK(corpus.size() > context + 1, "BatchSampler: corpus of ", corpus.size(),
                   " bytes is too short for context ", context);
}

std::pair<Tensor, Tensor> BatchSampler::batch(int64_t step) const {
  Tensor x = Tensor::empty({batch_, context_}, DataType::kI32);
  Tensor y = Tensor::empty({batch_, context_}, DataType::kI32);
  const uint64_t starts = static_cast<uint64_t>(corpus_.size() - context_ - 1) + 1;
  const auto& bytes = corpus_.bytes();
  for (int64_t r = 0; r < batch_; ++r) {
    // 64 random bits from (seed, step, row); the modulo bias is < starts / 2^64.
    const auto bits =
        philox4x32({static_cast<uint32_t>(r), static_cast<uint32_t>(r >> 32),
                    static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32)},
                   {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
    const uint64_t start = ((uint64_t{bits[0]} << 32) | bits[1]) % starts;
    int32_t* xr = x.data<int32_t>() + r * context_;
    int32_t* yr = y.data<int32_t>() + r * context_;
    for (int64_t t = 0; t < context_; ++t) {
      xr[t] = bytes[start + t];
      yr[t] = bytes[start + t + 1];
    }
  }
  return {x, y};
}

}  // namespace chorus::tensor
