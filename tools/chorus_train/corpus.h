// The built-in corpus: text chorus-train learns when no --data file is given.
#pragma once

#include <cstdint>
#include <vector>

namespace chorus::train {

// About 200 KiB of generated sentences about small numbers ("seven plus five is twelve."):
// regular enough that a small GPT's loss falls visibly within a few dozen steps, varied enough
// that it does not fall to zero. The same bytes on every rank and every run.
std::vector<uint8_t> builtin_corpus();

}  // namespace chorus::train
