#include "transport/factory.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "chorus/build_config.h"
#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/log.h"
#include "chorus/timeout.h"
#include "transport/shm/shm_transport.h"
#if CHORUS_HAVE_UCX
#include "transport/composite_transport.h"
#include "transport/ucx/ucx_transport.h"
#endif

namespace chorus::transport {
namespace {

const StringKnob kTransport{"CHORUS_TRANSPORT", "auto",
                            "auto = shm between ranks of one host, ucx between hosts; ucx = UCX "
                            "for every peer (e.g. to compare with shm on one host); shm = refuse "
                            "multi-host jobs"};

// The package (socket) of a CPU, or -1.
int cpu_package(int cpu) {
  std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                   "/topology/physical_package_id");
  int id = -1;
  return in >> id ? id : -1;
}

// The NUMA node of a CPU (its "node<k>" entry in sysfs), or -1.
int cpu_numa(int cpu) {
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int node = -1;
  while (const dirent* e = ::readdir(d)) {
    int k = -1;
    char tail = 0;
    if (std::sscanf(e->d_name, "node%d%c", &k, &tail) == 1) {
      node = k;
      break;
    }
  }
  ::closedir(d);
  return node;
}

// "<host id>\n<package> <numa> <cpu>": the value of "host/<rank>".
// This process's CPU affinity mask as a list ("0-3,8"), or "-" when it may run on every online
// CPU (not bound) or the mask cannot be read.
std::string affinity_list() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0 || online <= 0 || CPU_COUNT(&mask) >= online)
    return "-";
  std::string list;
  for (int cpu = 0; cpu < CPU_SETSIZE;) {
    if (!CPU_ISSET(cpu, &mask)) {
      ++cpu;
      continue;
    }
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &mask)) ++last;
    list += detail::concat(list.empty() ? "" : ",", cpu);
    if (last > cpu) list += detail::concat("-", last);
    cpu = last + 1;
  }
  return list.empty() ? "-" : list;
}

// The CPUs of a list written by affinity_list() into `cpus`; false for "-" (every CPU).
bool parse_affinity(const std::string& list, std::set<int>* cpus) {
  if (list.empty() || list == "-") return false;
  std::istringstream in(list);
  std::string range;
  while (std::getline(in, range, ',')) {
    const size_t dash = range.find('-');
    try {
      const int lo = std::stoi(range.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(range.substr(dash + 1));
      for (int c = lo; c <= hi && c < CPU_SETSIZE; ++c) cpus->insert(c);
    } catch (const std::exception&) {
      return false;  // unreadable: count it as every CPU
    }
  }
  return !cpus->empty();
}

// "<host id>\n<package> <numa> <cpu> <affinity list>": the transports that publish the host id
// on its own (UCX) read up to the newline.
std::string place_record(const std::string& host_id, const RankPlace& p) {
  return detail::concat(host_id, "\n", p.package, " ", p.numa, " ", p.cpu, " ", affinity_list());
}

void parse_place(const std::string& record, std::string* host_id, RankPlace* place,
                 std::string* affinity) {
  const size_t nl = record.find('\n');
  *host_id = record.substr(0, nl);
  *place = {};
  affinity->clear();
  if (nl == std::string::npos) return;
  std::istringstream in(record.substr(nl + 1));
  int package = -1, numa = -1, cpu = -1;
  if (in >> package >> numa >> cpu) *place = {0, package, numa, cpu};
  in >> *affinity;
}

// Host index per rank, numbered in order of each host's lowest rank, and every rank's place.
std::vector<int> gather_hosts(int rank, int world_size, Store& store,
                              std::chrono::milliseconds timeout, int* hosts,
                              std::vector<RankPlace>* places, int* host_cpus) {
  const std::string me = local_host_id();
  const RankPlace here = local_place();
  const std::string my_affinity = affinity_list();
  store.set("host/" + std::to_string(rank), place_record(me, here));
  // The CPUs this host's ranks may run on together (the union of their masks).
  std::set<int> cpus;
  bool every_cpu = false;
  std::map<std::string, int> index;
  std::vector<int> host_of(world_size);
  places->assign(world_size, {});
  for (int p = 0; p < world_size; ++p) {
    std::string id = me, affinity = my_affinity;
    RankPlace place = here;
    if (p != rank) try {
        parse_place(store.get("host/" + std::to_string(p), timeout), &id, &place, &affinity);
      } catch (const Timeout&) {
        throw Timeout(detail::concat("rank ", p, " did not join within ", describe_timeout(timeout),
                                     " (is it running, with the same world size and master "
                                     "address? CHORUS_TIMEOUT sets the deadline)"),
                      rank, "connect", -1, p);
      }
    host_of[p] = index.emplace(id, static_cast<int>(index.size())).first->second;
    place.host = host_of[p];
    (*places)[p] = place;
    if (id == me && !every_cpu && !parse_affinity(affinity, &cpus)) every_cpu = true;
  }
  *hosts = static_cast<int>(index.size());
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  *host_cpus = every_cpu || cpus.empty() ? static_cast<int>(std::max(1L, online))
                                         : static_cast<int>(cpus.size());
  return host_of;
}

[[noreturn]] void refuse_hosts(int rank, const Wiring& w, const char* why) {
  std::string where;
  const int n = static_cast<int>(w.host_of.size());
  for (int p = 0; p < n && p < 8; ++p)
    where += detail::concat(p == 0 ? "" : ", ", "rank ", p, " on host ", w.host_of[p]);
  throw Error(ErrorKind::kInvalidArgument,
              detail::concat("the ranks span ", w.hosts, " hosts (", where, n > 8 ? ", ..." : "",
                             ") but ", why,
                             "; or give every rank the same CHORUS_HOST_ID if they "
                             "do share memory"),
              rank);
}

}  // namespace

RankPlace local_place() {
  RankPlace place;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (::sched_getaffinity(0, sizeof mask, &mask) != 0) return place;
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (online <= 0 || CPU_COUNT(&mask) >= online) return place;  // not bound
  int first = -1, package = -2, numa = -2;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mask)) continue;
    if (first < 0) first = cpu;
    const int pk = cpu_package(cpu), nd = cpu_numa(cpu);
    package = package == -2 || package == pk ? pk : -1;
    numa = numa == -2 || numa == nd ? nd : -1;
  }
  if (first < 0) return place;
  place.package = package;
  place.numa = numa;
  place.cpu = first;
  return place;
}

Wiring connect(int rank, int world_size, Store& store, const std::string& segment_prefix,
               std::chrono::milliseconds timeout) {
  Wiring w;
  w.host_of = gather_hosts(rank, world_size, store, timeout, &w.hosts, &w.places, &w.host_cpus);
  const std::string choice = kTransport.get();
  CHORUS_ARG_CHECK(choice == "auto" || choice == "shm" || choice == "ucx", "CHORUS_TRANSPORT='",
                   choice, "' (use auto, shm or ucx)");
  const bool force_ucx = choice == "ucx";
  if (w.hosts == 1 && !force_ucx) {
    w.transport = std::make_unique<ShmTransport>(rank, world_size, store, segment_prefix, timeout,
                                                 ShmOptions::from_env());
    return w;
  }
  if (choice == "shm")
    refuse_hosts(rank, w, "CHORUS_TRANSPORT=shm connects ranks of one host only");
#if CHORUS_HAVE_UCX
  std::vector<int> near, far;  // ranks of this host (with this one), and the others
  std::vector<bool> local(world_size);
  for (int p = 0; p < world_size; ++p) {
    local[p] = !force_ucx && w.host_of[p] == w.host_of[rank];
    if (local[p])
      near.push_back(p);
    else if (p != rank)
      far.push_back(p);
  }
  auto ucx = std::make_unique<UcxTransport>(rank, world_size, far, store, timeout);
  if (near.size() <= 1) {
    w.transport = std::move(ucx);
  } else {
    auto shm = std::make_unique<ShmTransport>(rank, world_size, store, segment_prefix, timeout,
                                              ShmOptions::from_env(), near);
    w.transport =
        std::make_unique<CompositeTransport>(std::move(local), std::move(shm), std::move(ucx));
  }
  CHORUS_INFO(kLogInit, "rank ", rank, ": ", near.size() - 1, " peers over shm, ", far.size(),
              " over ucx (", w.hosts, " hosts)");
  return w;
#else
  if (force_ucx) refuse_hosts(rank, w, "CHORUS_TRANSPORT=ucx needs a build with CHORUS_WITH_UCX");
  refuse_hosts(rank, w,
               "this build connects ranks of one host only (shared memory); build with "
               "CHORUS_WITH_UCX for multi-host jobs");
#endif
}

}  // namespace chorus::transport
