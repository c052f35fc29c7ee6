// chorus — where a per-host file of measurements lives: $XDG_CACHE_HOME/chorus (else
// ~/.cache/chorus, else /tmp/chorus), named by what it holds and the host's name
// ("tune-HOST.txt", "cost-HOST.txt"), so that hosts sharing a home directory keep their own.
#pragma once

#include <string>
#include <string_view>

namespace chorus::algo {

std::string host_cache_file(std::string_view kind);

}  // namespace chorus::algo
