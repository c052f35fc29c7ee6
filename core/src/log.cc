#include "chorus/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "chorus/config.h"

namespace chorus {
namespace {

const StringKnob kDebug{"CHORUS_DEBUG", "WARN", "log level: NONE, WARN, INFO or TRACE"};
const StringKnob kDebugSubsys{
    "CHORUS_DEBUG_SUBSYS", "ALL",
    "comma-separated subsystems to log: INIT,BOOT,SHM,COLL,TUNE,RUN,UCX,PAR,ALL"};

std::atomic<int> g_rank{-1};

struct LogSettings {
  LogLevel level = LogLevel::kWarn;
  uint32_t mask = kLogAll;
};

LogSettings read_settings() {
  LogSettings s;
  std::string lv = kDebug.get();
  if (lv == "NONE")
    s.level = LogLevel::kNone;
  else if (lv == "INFO")
    s.level = LogLevel::kInfo;
  else if (lv == "TRACE")
    s.level = LogLevel::kTrace;
  std::string sub = kDebugSubsys.get();
  if (sub != "ALL") {
    s.mask = 0;
    size_t pos = 0;
    while (pos <= sub.size()) {
      size_t comma = sub.find(',', pos);
      std::string item =
          sub.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      if (item == "INIT")
        s.mask |= kLogInit;
      else if (item == "BOOT")
        s.mask |= kLogBoot;
      else if (item == "SHM")
        s.mask |= kLogShm;
      else if (item == "COLL")
        s.mask |= kLogColl;
      else if (item == "TUNE")
        s.mask |= kLogTune;
      else if (item == "RUN")
        s.mask |= kLogRun;
      else if (item == "UCX")
        s.mask |= kLogUcx;
      else if (item == "PAR")
        s.mask |= kLogPar;
      else if (item == "ALL")
        s.mask = kLogAll;
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  return s;
}

const LogSettings& settings() {
  static const LogSettings s = read_settings();
  return s;
}

const char* subsys_name(uint32_t subsys) {
  switch (subsys) {
    case kLogInit:
      return "INIT";
    case kLogBoot:
      return "BOOT";
    case kLogShm:
      return "SHM";
    case kLogColl:
      return "COLL";
    case kLogTune:
      return "TUNE";
    case kLogRun:
      return "RUN";
    case kLogUcx:
      return "UCX";
    case kLogPar:
      return "PAR";
    default:
      return "ALL";
  }
}

}  // namespace

void set_log_rank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }

bool log_enabled(LogLevel level, uint32_t subsys) {
  const auto& s = settings();
  return level <= s.level && (s.mask & subsys) != 0;
}

void log_line(LogLevel level, uint32_t subsys, std::string_view text) {
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  int rank = g_rank.load(std::memory_order_relaxed);
  std::string line = std::string(host) + ":" + std::to_string(getpid()) + ":" +
                     (rank >= 0 ? std::to_string(rank) : std::string("-")) + " [" +
                     subsys_name(subsys) + "] " + (level == LogLevel::kWarn ? "WARN " : "") +
                     std::string(text) + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());  // one write: lines stay whole
}

}  // namespace chorus
