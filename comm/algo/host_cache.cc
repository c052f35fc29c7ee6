#include "algo/host_cache.h"

#include <unistd.h>

#include <cstdlib>

namespace chorus::algo {

std::string host_cache_file(std::string_view kind) {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string dir = cache != nullptr && *cache != '\0' ? std::string(cache)
                          : home != nullptr && *home != '\0' ? std::string(home) + "/.cache"
                                                             : std::string("/tmp");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return dir + "/chorus/" + std::string(kind) + "-" + host + ".txt";
}

}  // namespace chorus::algo
