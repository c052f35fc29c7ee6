// chorus-run — removal of a job's leftover POSIX shared-memory segments.
//
// chorus names every segment /chorus-<job id>-...; a rank that crashes cannot unlink its own, so
// once every rank of the job has exited, the launcher removes what is left.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::run {

// Removes every `dir`/chorus-<job_id>-* and returns the names removed. Errors on single entries
// are logged and skipped: sweeping is best effort and never fails the job.
std::vector<std::string> sweep_job_shm(std::string_view job_id,
                                       const std::filesystem::path& dir = "/dev/shm");

}  // namespace chorus::run
