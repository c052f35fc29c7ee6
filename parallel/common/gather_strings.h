// Internal: every rank's string, gathered over a communicator (lengths first, then the texts
// padded to the longest).
#pragma once

#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::parallel {

// Collective over `world`: rank r's `mine` at index r, on every rank.
std::vector<std::string> gather_strings(Communicator& world, const std::string& mine);

}  // namespace chorus::parallel
