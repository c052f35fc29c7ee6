#include "shm_sweep.h"

#include <system_error>

#include "chorus/log.h"

namespace chorus::run {

std::vector<std::string> sweep_job_shm(std::string_view job_id, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const std::string prefix = "chorus-" + std::string(job_id) + "-";
  std::vector<std::string> removed;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    std::error_code remove_ec;
    if (fs::remove(it->path(), remove_ec)) {
      removed.push_back(name);
    } else if (remove_ec) {
      CHORUS_WARN(kLogRun, "cannot remove ", it->path().string(), ": ", remove_ec.message());
    }
  }
  if (ec && ec != std::errc::no_such_file_or_directory)
    CHORUS_WARN(kLogRun, "cannot list ", dir.string(), ": ", ec.message());
  return removed;
}

}  // namespace chorus::run
