// chorus-run — the job id that names a job's shared-memory segments (/dev/shm/chorus-<id>-*).
#pragma once

#include <string>
#include <string_view>

namespace chorus::run {

// CHORUS_JOB_ID from the environment when set (validated), else a fresh random [a-z0-9]{12}.
// Throws chorus::InvalidArgument for an id that cannot be part of a file name, and when a job
// of several nodes has none (each node would make up a different one).
std::string resolve_job_id(int nnodes);

std::string random_job_id();

// Letters, digits, '_' and '-'; 1 to 64 characters.
bool is_valid_job_id(std::string_view id);

}  // namespace chorus::run
