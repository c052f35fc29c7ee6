// chorus-run — --tag-output: copies each rank's stdout and stderr to ours, every line prefixed
// with "[<rank>] ".
#pragma once

#include <poll.h>

#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chorus/unique_fd.h"

namespace chorus::run {

// Cuts a byte stream into lines and prefixes each with a tag. No I/O.
class LineTagger {
 public:
  // A line longer than this is emitted in tagged pieces, so memory stays bounded.
  static constexpr size_t kMaxLine = 64 * 1024;

  explicit LineTagger(std::string tag) : tag_(std::move(tag)) {}
  // Takes more of the stream; returns the lines it completed, tagged, each ending in '\n'.
  std::string feed(std::string_view data);
  // The unterminated remainder, tagged and given a '\n' ("" when there is none).
  std::string finish();

 private:
  std::string tag_;
  std::string partial_;
};

class TaggedOutput {
 public:
  // Copies `source` (the read end of a rank's pipe) to `sink`, tagging lines with `tag`.
  void add(std::string tag, UniqueFd source, int sink);
  bool empty() const { return streams_.empty(); }

  // Appends one pollfd per open source, in a fixed order...
  void add_pollfds(std::vector<pollfd>& fds) const;
  // ...and, given those entries back after poll(), reads the ready sources. A source at EOF has
  // its remainder flushed and is dropped.
  void service(std::span<const pollfd> fds);

  // Reads until every source is at EOF or `deadline` passes (a rank's child may hold its pipe
  // open), then flushes and drops what is left.
  void drain(std::chrono::steady_clock::time_point deadline);

 private:
  struct Stream {
    UniqueFd source;
    int sink;
    LineTagger tagger;
  };
  // Returns false once the source is at EOF (or broken).
  static bool copy_available(Stream& stream);

  std::vector<Stream> streams_;
};

}  // namespace chorus::run
