// chorus — environment knobs, each declared once with a name, a type, a default and a line of
// description (like NCCL_PARAM). `chorus-train --print-env` lists them all (knob_table.h).
//
//   inline const chorus::IntKnob kSlotBytes{"CHORUS_SHM_SLOT_BYTES", 1 << 17, "shm FIFO slot
//   size"}; size_t b = kSlotBytes.get();   // env value, or the default; a malformed value throws
//
// Values are read from the environment on each get(): read them at set-up, not on hot paths.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chorus {

struct KnobInfo {
  std::string name;
  std::string type;
  std::string default_value;
  std::string description;
};

// Every knob constructed so far, in declaration order (knobs register themselves).
std::vector<KnobInfo> all_knobs();

class IntKnob {
 public:
  IntKnob(const char* name, int64_t default_value, const char* description);
  // The env value (decimal, with an optional K/M/G suffix meaning 2^10/2^20/2^30) or the default.
  int64_t get() const;
  const char* name() const { return name_; }

 private:
  const char* name_;
  int64_t default_;
};

class DoubleKnob {
 public:
  DoubleKnob(const char* name, double default_value, const char* description);
  double get() const;
  const char* name() const { return name_; }

 private:
  const char* name_;
  double default_;
};

class StringKnob {
 public:
  StringKnob(const char* name, const char* default_value, const char* description);
  std::string get() const;
  // The env value if set and non-empty.
  std::optional<std::string> get_if_set() const;
  const char* name() const { return name_; }

 private:
  const char* name_;
  const char* default_;
};

// Parses "123", "64K", "1M", "2G" (binary multiples); nullopt when malformed or negative.
std::optional<int64_t> parse_size(const std::string& text);

// getenv as an optional: unset and empty are both "not set".
std::optional<std::string> env_get(const char* name);

}  // namespace chorus
