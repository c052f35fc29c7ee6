#include "corpus.h"

#include <string>

namespace chorus::train {
namespace {

const char* const kNumbers[] = {"zero",    "one",     "two",       "three",    "four",
                                "five",    "six",     "seven",     "eight",    "nine",
                                "ten",     "eleven",  "twelve",    "thirteen", "fourteen",
                                "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};

}  // namespace

std::vector<uint8_t> builtin_corpus() {
  std::string text;
  // A small linear congruential sequence picks the operands: the same text everywhere.
  uint32_t state = 12345;
  auto next = [&](uint32_t n) {
    state = state * 1664525u + 1013904223u;
    return (state >> 8) % n;
  };
  while (text.size() < 200 * 1024) {
    const uint32_t a = next(10), b = next(10);
    switch (next(3)) {
      case 0:
        text += std::string(kNumbers[a]) + " plus " + kNumbers[b] + " is " + kNumbers[a + b] + ". ";
        break;
      case 1:
        if (a >= b)
          text +=
              std::string(kNumbers[a]) + " minus " + kNumbers[b] + " is " + kNumbers[a - b] + ". ";
        else
          text += std::string(kNumbers[b]) + " is more than " + kNumbers[a] + ". ";
        break;
      default:
        text += "the number after " + std::string(kNumbers[a]) + " is " + kNumbers[a + 1] + ". ";
        break;
    }
    if (next(8) == 0) text += "\n";
  }
  return {text.begin(), text.end()};
}

}  // namespace chorus::train
