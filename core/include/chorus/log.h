// chorus — logging by level and subsystem (like NCCL_DEBUG / NCCL_DEBUG_SUBSYS).
//
//   CHORUS_DEBUG=WARN|INFO|TRACE      (default WARN)
//   CHORUS_DEBUG_SUBSYS=INIT,BOOT,SHM,COLL,TUNE,RUN,UCX,PAR,ALL   (default ALL)
// Every line goes to stderr prefixed "host:pid:rank [SUBSYS] ".
#pragma once

#include <cstdint>
#include <string_view>

#include "chorus/error.h"

namespace chorus {

enum class LogLevel : uint8_t { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

enum LogSubsys : uint32_t {
  kLogInit = 1u << 0,
  kLogBoot = 1u << 1,
  kLogShm = 1u << 2,
  kLogColl = 1u << 3,
  kLogTune = 1u << 4,
  kLogRun = 1u << 5,
  kLogUcx = 1u << 6,
  kLogPar = 1u << 7,  // the parallel layer: meshes, data parallelism, ZeRO
  kLogAll = ~0u,
};

// The rank printed in log prefixes of this process (-1 prints "-").
void set_log_rank(int rank);
bool log_enabled(LogLevel level, uint32_t subsys);
void log_line(LogLevel level, uint32_t subsys, std::string_view text);

}  // namespace chorus

#define CHORUS_LOG(level, subsys, ...)                                      \
  do {                                                                      \
    if (::chorus::log_enabled(::chorus::LogLevel::level, ::chorus::subsys)) \
      ::chorus::log_line(::chorus::LogLevel::level, ::chorus::subsys,       \
                         ::chorus::detail::concat(__VA_ARGS__));            \
  } while (0)
#define CHORUS_WARN(subsys, ...) CHORUS_LOG(kWarn, subsys, __VA_ARGS__)
#define CHORUS_INFO(subsys, ...) CHORUS_LOG(kInfo, subsys, __VA_ARGS__)
#define CHORUS_TRACE(subsys, ...) CHORUS_LOG(kTrace, subsys, __VA_ARGS__)
