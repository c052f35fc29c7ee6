// chorus — telling chorus-run which rank a failure comes from.
//
// chorus-run names the rank that failed first. By exit order alone it would sometimes name a
// consequence: a rank killed outright takes a moment to finish dying, and the ranks that fail
// because of it can exit before it has. So chorus-run hands every rank a datagram socket
// (CHORUS_RUN_STATUS_FD; tools/chorus_run/failure_reports.h), and a from_env communicator that
// fails, in set-up or in an operation, sends one line there: "failed <rank> <cause>", <cause>
// being the rank its error names as the origin (Error::peer(): the rank that failed first, died,
// or was waited for), or this rank for its own errors. Without chorus-run there is no pipe and
// nothing is written.
#pragma once

#include "chorus/error.h"

namespace chorus {

// The rank `e` names as the origin of a failure seen by `rank`: its peer() for a PeerFailure or a
// Timeout (the rank that failed first, died, hosts the lost store, or was waited for), else
// `rank` itself.
int blamed_rank(const Error& e, int rank, int world_size);

// Sends the report, once per process (later failures follow from the first). Never blocks or
// throws.
void report_failure_to_launcher(int rank, int cause) noexcept;

}  // namespace chorus
