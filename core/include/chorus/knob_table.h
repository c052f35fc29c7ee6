// chorus — the table of environment knobs that `--print-env` prints: every knob linked into the
// program (knobs register themselves, config.h), with its type, current value, default and
// meaning. chorus-train links every layer whole, so `chorus-train --print-env` lists every knob
// of chorus; chorus-run and chorus-bench list the ones they link.
#pragma once

#include <cstdio>

namespace chorus {

// Writes the table, sorted by name, one knob per line under a header line.
void print_knobs(std::FILE* out);

}  // namespace chorus
