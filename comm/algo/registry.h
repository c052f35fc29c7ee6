// chorus — the algorithm table: every registered algorithm of every collective, what each needs
// of the communicator to run (AlgoEntry::supports), and the fixed size thresholds used where no
// tune table applies. The choice among the entries is algo/selector.h.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "algo/algorithm.h"

namespace chorus::algo {

// What decides whether an algorithm can run on a communicator. Fixed at set-up and the same on
// every rank, so every rank reaches the same verdict.
struct Capabilities {
  int world_size = 1;
  int hosts = 1;  // hosts the ranks span (Context::host_of)
  // The transport gives every rank one shared fan-out buffer (Transport::fans_out); true for a
  // communicator of one rank, which runs nothing but a local copy.
  bool fans_out = true;
};

// Why an algorithm cannot run with `caps`; empty when it can.
using SupportFn = std::string (*)(Algorithm algo, const Capabilities& caps);

struct AlgoEntry {
  Collective coll;
  Algorithm algo;
  AlgoFn run;
  const char* description;
  SupportFn supports;
};

// Why `e` cannot run with `caps` (a sentence naming the algorithm's need); empty when it can.
std::string supports(const AlgoEntry& e, const Capabilities& caps);

// Every registered algorithm, for listing (chorus-bench --list, docs).
std::span<const AlgoEntry> all_algorithms();
const AlgoEntry* find_algorithm(Collective coll, Algorithm algo);

// The default choice by size (selection bytes, algo/selector.h).
Algorithm select_default(Collective coll, size_t bytes, int world_size);
// The same for a communicator whose ranks live on the hosts `host_of` (Context::host_of): the
// hierarchical algorithm where it has one and the ranks span hosts, else the choice by size.
Algorithm select_default(Collective coll, size_t bytes, int world_size,
                         std::span<const int> host_of);
// The choice by size among the algorithms that fold in rank order (deterministic mode): direct
// for small reductions, twoshot above, on any number of hosts; select_default() for the
// collectives that do not reduce.
Algorithm select_rank_ordered(Collective coll, size_t bytes, int world_size);

}  // namespace chorus::algo
