// Launcher detection. The first launcher whose rank variable is set wins:
//   chorus (CHORUS_RANK or CHORUS_WORLD_SIZE), torchrun (RANK), Open MPI (OMPI_COMM_WORLD_RANK),
//   Slurm (SLURM_PROCID); none of them -> a single-process job.
// Open MPI is checked before Slurm: mpirun inside a Slurm allocation starts its daemons with srun,
// so the ranks it launches inherit the daemon's SLURM_PROCID/SLURM_NTASKS (node index and node
// count), which are wrong for the ranks. Under srun alone no OMPI_COMM_WORLD_* variable exists.
//
// An empty variable counts as unset. Every malformed or inconsistent value is reported with the
// variable's name and value.
#include "chorus/launch_env.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/log.h"

namespace chorus {
namespace {

// The chorus variables, declared once so they are listed with every other knob. Detection reads
// them through an EnvLookup (tests pass a map), so only their names are used here.
const IntKnob kRankVar{"CHORUS_RANK", 0,
                       "rank of this process (set by chorus-run; wins over "
                       "torchrun, Open MPI and Slurm variables)"};
const IntKnob kWorldSizeVar{"CHORUS_WORLD_SIZE", 1, "number of ranks in the job"};
const IntKnob kLocalRankVar{"CHORUS_LOCAL_RANK", 0, "rank of this process among those on its host"};
const IntKnob kLocalWorldSizeVar{"CHORUS_LOCAL_WORLD_SIZE", 1, "number of ranks on this host"};
const StringKnob kMasterAddrVar{"CHORUS_MASTER_ADDR", "127.0.0.1",
                                "host serving the bootstrap store (rank 0); wins over MASTER_ADDR"};
const IntKnob kMasterPortVar{"CHORUS_MASTER_PORT", 29500,
                             "port of the bootstrap store; wins over MASTER_PORT"};
const IntKnob kStoreFdVar{"CHORUS_STORE_FD", -1,
                          "listening socket inherited from chorus-run, served by rank 0"};
const StringKnob kJobIdVar{"CHORUS_JOB_ID", "", "job identifier set by chorus-run ([A-Za-z0-9_-])"};

constexpr size_t kMaxJobIdBytes = 64;
constexpr int kDefaultMasterPort = 29500;

struct Launcher {
  const char* name;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;  // nullptr for Slurm, which describes it differently
};

const Launcher kChorus{"chorus", kRankVar.name(), kWorldSizeVar.name(), kLocalRankVar.name(),
                       kLocalWorldSizeVar.name()};
const Launcher kTorchrun{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
const Launcher kOpenMpi{"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
const Launcher kSlurm{"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr};

class Env {
 public:
  explicit Env(const EnvLookup& lookup) : lookup_(lookup) {}

  std::optional<std::string> get(const char* name) const {
    auto value = lookup_(name);
    if (value && value->empty()) return std::nullopt;
    return value;
  }
  bool has(const char* name) const { return get(name).has_value(); }

  // A non-negative decimal integer, or nullopt when unset.
  std::optional<int> integer(const char* name) const {
    auto text = get(name);
    if (!text) return std::nullopt;
    return parse_integer(name, *text);
  }
  // The same, but the variable must be set because `reason` is.
  int required(const char* name, const char* reason) const {
    auto value = integer(name);
    CHORUS_ARG_CHECK(value.has_value(), reason, " is set but ", name, " is not");
    return *value;
  }

  static int parse_integer(const char* name, const std::string& text) {
    CHORUS_ARG_CHECK(text[0] != '-', name, "='", text, "' is negative");
    int value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value);
    CHORUS_ARG_CHECK(ec != std::errc::result_out_of_range, name, "='", text, "' is out of range");
    CHORUS_ARG_CHECK(ec == std::errc() && ptr == end, name, "='", text, "' is not an integer");
    return value;
  }

 private:
  const EnvLookup& lookup_;
};

void check_local(const LaunchEnv& out, const char* local_rank_var, const char* local_size_var,
                 const char* world_size_var) {
  CHORUS_ARG_CHECK(out.local_world_size >= 1, local_size_var, "='", out.local_world_size,
                   "' must be at least 1");
  CHORUS_ARG_CHECK(out.local_rank < out.local_world_size, local_rank_var, "='", out.local_rank,
                   "' is not below ", local_size_var, "='", out.local_world_size, "'");
  CHORUS_ARG_CHECK(out.local_world_size <= out.world_size, local_size_var, "='",
                   out.local_world_size, "' exceeds ", world_size_var, "='", out.world_size, "'");
}

// Rank and world size; `trigger` is the variable whose presence selected this launcher.
void read_global(const Env& env, const Launcher& l, const char* trigger, LaunchEnv& out) {
  out.launcher = l.name;
  out.rank = env.required(l.rank, trigger);
  out.world_size = env.required(l.world_size, trigger);
  CHORUS_ARG_CHECK(out.world_size >= 1, l.world_size, "='", out.world_size, "' must be at least 1");
  CHORUS_ARG_CHECK(out.world_size <= kMaxWorldSize, l.world_size, "='", out.world_size,
                   "' is more ranks than chorus supports (at most ", kMaxWorldSize,
                   "); check the launcher's variables");
  CHORUS_ARG_CHECK(out.rank < out.world_size, l.rank, "='", out.rank, "' is not below ",
                   l.world_size, "='", out.world_size, "'");
}

void read_launcher(const Env& env, const Launcher& l, const char* trigger, LaunchEnv& out) {
  read_global(env, l, trigger, out);
  auto local_rank = env.integer(l.local_rank);
  auto local_size = env.integer(l.local_world_size);
  if (!local_rank && !local_size) {
    // Nothing says how ranks are spread over hosts: the common case is one host.
    out.local_rank = out.rank;
    out.local_world_size = out.world_size;
    CHORUS_INFO(kLogBoot, l.local_rank, " and ", l.local_world_size,
                " are not set: assuming every rank runs on this host");
  } else {
    CHORUS_ARG_CHECK(local_rank.has_value(), l.local_world_size, " is set but ", l.local_rank,
                     " is not");
    CHORUS_ARG_CHECK(local_size.has_value(), l.local_rank, " is set but ", l.local_world_size,
                     " is not");
    out.local_rank = *local_rank;
    out.local_world_size = *local_size;
  }
  check_local(out, l.local_rank, l.local_world_size, l.world_size);
}

// One entry of SLURM_TASKS_PER_NODE: `count` tasks on each of `nodes` consecutive nodes.
struct TasksPerNode {
  int count;
  int nodes;
};

// Parses Slurm's compressed list, e.g. "4(x2),3" = 4 tasks on two nodes, then 3 on one.
std::vector<TasksPerNode> parse_tasks_per_node(const std::string& text) {
  constexpr const char* kVar = "SLURM_TASKS_PER_NODE";
  std::vector<TasksPerNode> entries;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    TasksPerNode entry{0, 1};
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      CHORUS_ARG_CHECK(item.back() == ')', kVar, "='", text, "' is malformed");
      std::string repeat = item.substr(paren + 2, item.size() - paren - 3);
      CHORUS_ARG_CHECK(!repeat.empty(), kVar, "='", text, "' is malformed");
      entry.nodes = Env::parse_integer(kVar, repeat);
      item.resize(paren);
    }
    CHORUS_ARG_CHECK(!item.empty(), kVar, "='", text, "' is malformed");
    entry.count = Env::parse_integer(kVar, item);
    CHORUS_ARG_CHECK(entry.count >= 1 && entry.nodes >= 1, kVar, "='", text, "' is malformed");
    entries.push_back(entry);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return entries;
}

struct SlurmLocalSize {
  int size;
  const char* var;  // where it came from, for messages
};

// Ranks on this node: exact from SLURM_TASKS_PER_NODE and SLURM_NODEID (the last node of
// `-n 5 --ntasks-per-node=2` has one task), else SLURM_NTASKS_PER_NODE, else the uniform count.
SlurmLocalSize slurm_local_world_size(const Env& env) {
  constexpr const char* kTasksPerNode = "SLURM_TASKS_PER_NODE";
  constexpr const char* kNTasksPerNode = "SLURM_NTASKS_PER_NODE";
  std::optional<int> uniform;
  bool tasks_per_node_set = false;
  if (auto text = env.get(kTasksPerNode)) {
    tasks_per_node_set = true;
    auto entries = parse_tasks_per_node(*text);
    if (auto node = env.integer("SLURM_NODEID")) {
      int first = 0;
      for (const auto& e : entries) {
        if (*node < first + e.nodes) return {e.count, kTasksPerNode};
        first += e.nodes;
      }
      throw InvalidArgument(detail::concat("SLURM_NODEID='", *node, "' is beyond the ", first,
                                           " nodes of SLURM_TASKS_PER_NODE='", *text, "'"));
    }
    bool same = std::all_of(entries.begin(), entries.end(),
                            [&](const TasksPerNode& e) { return e.count == entries[0].count; });
    if (same) uniform = entries[0].count;
  }
  if (auto per_node = env.integer(kNTasksPerNode)) return {*per_node, kNTasksPerNode};
  if (uniform) return {*uniform, kTasksPerNode};
  CHORUS_ARG_CHECK(!tasks_per_node_set,
                   "SLURM_TASKS_PER_NODE differs between nodes but "
                   "SLURM_NODEID is not set: cannot tell how many ranks run "
                   "on this host (launch the job step with srun)");
  throw InvalidArgument(
      "SLURM_PROCID is set but neither SLURM_TASKS_PER_NODE nor SLURM_NTASKS_PER_NODE is: cannot "
      "tell how many ranks run on this host (launch the job step with srun)");
}

void read_slurm(const Env& env, LaunchEnv& out) {
  read_global(env, kSlurm, kSlurm.rank, out);
  out.local_rank = env.required(kSlurm.local_rank, kSlurm.rank);
  SlurmLocalSize local = slurm_local_world_size(env);
  out.local_world_size = local.size;
  check_local(out, kSlurm.local_rank, local.var, kSlurm.world_size);
}

void read_master(const Env& env, LaunchEnv& out) {
  const char* addr_var = env.has(kMasterAddrVar.name()) ? kMasterAddrVar.name() : "MASTER_ADDR";
  const char* port_var = env.has(kMasterPortVar.name()) ? kMasterPortVar.name() : "MASTER_PORT";
  if (auto addr = env.get(addr_var)) {
    out.master_addr = *addr;
  } else if (out.local_world_size < out.world_size) {
    throw InvalidArgument(detail::concat(
        "this ", out.launcher, " job spans several hosts (", out.world_size, " ranks, ",
        out.local_world_size,
        " on this host) but no bootstrap address is set: set "
        "CHORUS_MASTER_ADDR (e.g. to the first host of the job",
        out.launcher == "slurm" ? ": $(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)"
                                : "",
        ") and, if 29500 is taken, CHORUS_MASTER_PORT"));
  }
  if (auto port = env.integer(port_var)) {
    CHORUS_ARG_CHECK(*port <= 65535, port_var, "='", *port, "' is out of range (0-65535)");
    out.master_port = *port;
  } else {
    out.master_port = kDefaultMasterPort;
  }
}

void read_chorus_extras(const Env& env, LaunchEnv& out) {
  out.store_fd = env.integer(kStoreFdVar.name());
  if (auto id = env.get(kJobIdVar.name())) {
    bool valid = id->size() <= kMaxJobIdBytes && std::all_of(id->begin(), id->end(), [](char ch) {
                   return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                          (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
                 });
    CHORUS_ARG_CHECK(valid, kJobIdVar.name(), "='", *id, "' must be at most ", kMaxJobIdBytes,
                     " characters from [A-Za-z0-9_-]");
    out.job_id = *id;
  }
}

}  // namespace

LaunchEnv detect_launch_env(const EnvLookup& lookup) {
  Env env(lookup);
  LaunchEnv out;
  if (env.has(kChorus.rank)) {
    read_launcher(env, kChorus, kChorus.rank, out);
  } else if (env.has(kChorus.world_size)) {
    read_launcher(env, kChorus, kChorus.world_size, out);
  } else if (env.has(kTorchrun.rank)) {
    read_launcher(env, kTorchrun, kTorchrun.rank, out);
  } else if (env.has(kOpenMpi.rank)) {
    read_launcher(env, kOpenMpi, kOpenMpi.rank, out);
  } else if (env.has(kSlurm.rank)) {
    read_slurm(env, out);
  } else {
    out.launcher = "none";
  }
  read_master(env, out);
  read_chorus_extras(env, out);
  CHORUS_INFO(kLogBoot, "launcher ", out.launcher, ": rank ", out.rank, " of ", out.world_size,
              " (", out.local_rank, " of ", out.local_world_size,
              " on this host), bootstrap store ", out.master_addr, ":", out.master_port);
  return out;
}

LaunchEnv detect_launch_env() {
  return detect_launch_env([](const char* name) { return env_get(name); });
}

int local_device_index(int device_count) {
  if (device_count <= 0) return 0;
  int local_rank = 0;
  try {
    local_rank = detect_launch_env().local_rank;
  } catch (const Error&) {
    // A single process without launcher variables.
  }
  return local_rank % device_count;
}

}  // namespace chorus
