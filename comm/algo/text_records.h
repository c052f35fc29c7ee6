// chorus — the records of the line-based files chorus reads (the tune table, the cost constants):
// one record per line, '#' starting a comment, blank lines skipped.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace chorus::algo {

// Calls f(number, fields) for every record of `text`: its 1-based line number and its fields as
// a stream (the comment cut off).
template <class F>
void for_each_record(std::string_view text, F&& f) {
  std::istringstream in{std::string(text)};
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    fields >> std::ws;
    if (fields.eof()) continue;  // blank
    f(number, fields);
  }
}

}  // namespace chorus::algo
