// chorus-run — the job id that names a job's shared-memory segments (/dev/shm/chorus-<id>-*).
#pragma once

#include <string>
#include <string_view>

#include "chorus/unique_fd.h"

namespace chorus::run {

// CHORUS_JOB_ID from the environment when set (validated), else a fresh random [a-z0-9]{12}.
// Throws chorus::InvalidArgument for an id that cannot be part of a file name, and when a job
// of several nodes has none (each node would make up a different one).
std::string resolve_job_id(int nnodes);

std::string random_job_id();

// Letters, digits, '_' and '-'; 1 to 64 characters.
bool is_valid_job_id(std::string_view id);

// Claims job id `id` for node `node_rank` on this host for as long as the returned descriptor is
// open: a listening socket in the abstract namespace, "chorus-run/<id>/node<node_rank>" (released
// by the kernel when chorus-run ends, however it ends; no file to clean up). Two jobs with one id
// on one host would share shared-memory names (and each would sweep the other's at its end), so a
// second claim throws chorus::InvalidArgument naming the holder's pid. The nodes of one
// multi-node job share the id legitimately and claim it each for its own node rank.
UniqueFd claim_job_id(const std::string& id, int node_rank);

}  // namespace chorus::run
