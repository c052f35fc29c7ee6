// Test fixture for multi-host jobs on one machine: every "host" is a network namespace.
//
// NetnsHosts makes K namespaces chx<pid>h<i>, each with one veth device `cveth` (10.213.0.<i+1>/24)
// whose other end sits on a bridge in a switch namespace chx<pid>s; the addresses exist only
// inside those namespaces. It needs root (CAP_NET_ADMIN) and iproute2; available() says why not.
// The destructor removes the namespaces (their veth pairs go with them); namespaces of earlier
// runs whose process is gone are swept on construction, so a crashed run leaves nothing for
// long.
//
// run_on_hosts() forks the ranks of a job, rank r on host `host_of[r]`: each enters its
// namespace (setns), gets CHORUS_HOST_ID=<host>, UCX_TLS=tcp and UCX_NET_DEVICES=cveth (without
// them UCX would use shared memory across the namespaces, which share /dev/shm), and runs the
// body on a Communicator::from_env(); the store listens on host 0's address.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "chorus/communicator.h"

namespace chorus::testing {

class NetnsHosts {
 public:
  // Empty when namespaces can be made here, else the reason they cannot.
  static std::optional<std::string> unavailable();

  explicit NetnsHosts(int hosts);
  ~NetnsHosts();
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  int hosts() const { return static_cast<int>(names_.size()); }
  const std::string& name(int host) const { return names_[host]; }
  static std::string address(int host) { return "10.213.0." + std::to_string(host + 1); }
  static constexpr const char* kDevice = "cveth";

  struct Counters {
    uint64_t rx = 0, tx = 0;
  };
  // The byte counters of host `host`'s veth device.
  Counters counters(int host) const;

 private:
  std::vector<std::string> names_;
  std::string switch_;
};

struct HostRunOptions {
  std::chrono::milliseconds deadline{120000};
  std::map<std::string, std::string> env;  // extra environment for every rank
  std::vector<int> may_fail;               // ranks whose exit status is not checked
};

// Runs body(comm) on one rank per entry of host_of, rank r inside namespace host_of[r] of
// `hosts` (or, with hosts == nullptr, all on this host with CHORUS_HOST_ID=host<h>: distinct
// "hosts" that UCX may still reach over shared memory).
void run_on_hosts(const NetnsHosts* hosts, const std::vector<int>& host_of,
                  const std::function<void(Communicator&)>& body,
                  const HostRunOptions& options = {});

}  // namespace chorus::testing
