// chorus-run — what the ranks say about their failures, to name the one that failed first.
//
// Exit order alone cannot tell: a rank killed outright takes a little while to finish dying
// (threads, memory, sockets), and the ranks that fail because of it (they lose the bootstrap
// store, or see it gone) may have exited before it has. So chorus-run hands every rank one end of
// a datagram socket pair (CHORUS_RUN_STATUS_FD), and a chorus rank whose communicator fails sends
// one line there before anything else: "failed <rank> <cause>", <cause> being the rank its error
// names as the origin (itself for its own errors; comm/launcher_report.h). chorus-run follows
// these from the first rank to exit with a failure to the rank at the origin, as long as that one
// failed by itself too (not terminated by chorus-run). Programs that do not use chorus say
// nothing, and the exit order stands.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "chorus/unique_fd.h"

namespace chorus::run {

class FailureReports {
 public:
  FailureReports();

  // Handed to every rank (close-on-exec in chorus-run; each rank inherits it).
  int write_fd() const { return send_.get(); }
  // Readable when a report is waiting (non-blocking).
  int read_fd() const { return receive_.get(); }
  // Reads what is there; the first report of each rank counts.
  void read();
  // Parses one line ("failed 3 0"); tests use it directly.
  void add_line(const std::string& line);
  // The rank `rank` blames for its failure, if it said.
  std::optional<int> cause_of(int rank) const;

 private:
  UniqueFd receive_, send_;
  std::map<int, int> cause_;
};

}  // namespace chorus::run
