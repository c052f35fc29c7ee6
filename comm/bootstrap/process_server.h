// chorus — the bootstrap store server of this process.
//
// Under every launcher rank 0 serves the job's store, and every communicator that from_env()
// makes in the job rendezvouses on it: one after another (a trainer that makes its communicator
// again after an error, a test harness, a library called twice) or several side by side. The
// server therefore belongs to the process, not to one communicator: it starts with the first
// from_env() on rank 0 and serves until the process exits. Were it stopped with a communicator,
// a peer that makes its next communicator while rank 0 still tears down the last one would
// connect to the old server and lose it mid-set-up; and the listening socket inherited from
// chorus-run could be served only once. Communicators made on it get distinct ids (w1, w2, ...),
// so their keys and shared-memory segments never collide.
#pragma once

#include "chorus/launch_env.h"

namespace chorus::bootstrap {

// Serves the store `env` describes in this process, unless that is done already: on the
// listening socket inherited through CHORUS_STORE_FD (adopted once; it stays open until exit),
// else on master_addr:master_port. Throws chorus::Error when the socket cannot be served.
void serve_for_process(const LaunchEnv& env);

}  // namespace chorus::bootstrap
