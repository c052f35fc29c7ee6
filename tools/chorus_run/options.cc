#include "options.h"

#include <charconv>
#include <cstdlib>
#include <optional>

#include "chorus/config.h"
#include "chorus/error.h"

namespace chorus::run {
namespace {

const DoubleKnob kGrace{"CHORUS_RUN_GRACE", 3.0,
                        "chorus-run: seconds the other ranks get to exit after the first failure "
                        "(then SIGTERM, then SIGKILL a second later)"};

constexpr int kMaxRanksPerNode = 4096;
constexpr int kMaxNodes = 1 << 16;
constexpr double kMaxGraceSeconds = 86400;

constexpr std::string_view kSynopsis =
    "Usage: chorus-run -n N [--nnodes K --node-rank R] [--master-addr A] [--master-port P]\n"
    "                  [--tag-output] [--grace SECONDS] [--bind POLICY] PROGRAM [ARGS...]\n";

constexpr std::string_view kHelp =
    R"(Starts N ranks of PROGRAM on this host, supervises them, and stops the job when one fails.

Options:
  -n, --nproc-per-node N  ranks to start on this node (required)
      --nnodes K          nodes in the job (default 1); run one chorus-run per node
      --node-rank R       this node's index, 0..K-1 (default 0); node 0 hosts the store
      --master-addr A     address of node 0, where the bootstrap store listens
                          (default 127.0.0.1; required when K > 1)
      --master-port P     the store's TCP port (default 0: the kernel picks a free one;
                          a fixed port is required when K > 1)
      --tag-output        prefix every line the ranks print with "[<rank>] "
      --grace SECONDS     after the first rank fails, how long the others may take to exit on
                          their own before SIGTERM (then SIGKILL a second later);
                          default 3, or CHORUS_RUN_GRACE
      --bind POLICY       CPU binding of each rank (default none):
                            none   leave the ranks to the scheduler
                            cores  the cores near the rank's device: local rank i takes the
                                   i-th GPU in topology order and a share of that GPU's
                                   local cores, or (CPU jobs) a contiguous share of the cores
                            numa   a whole NUMA node, ranks round-robin over the nodes
                          (`chorus-topo --mesh` shows the same assignment)
      --print-env         list the CHORUS_* knobs built into chorus-run and exit
                          (chorus-train --print-env lists every knob of chorus)
  -h, --help              show this help and exit

Each rank gets CHORUS_RANK (= node_rank * N + local rank), CHORUS_WORLD_SIZE (= K * N),
CHORUS_LOCAL_RANK, CHORUS_LOCAL_WORLD_SIZE (= N), CHORUS_NNODES, CHORUS_NODE_RANK,
CHORUS_MASTER_ADDR, CHORUS_MASTER_PORT and CHORUS_JOB_ID. On node 0, chorus-run opens the
store's listening socket itself (so a free port is never lost to a race) and hands it to
rank 0 alone as CHORUS_STORE_FD. CHORUS_RUN_STATUS_FD is a pipe on which a chorus rank whose
communicator fails names the rank it blames, so that chorus-run names the rank that failed
first even when others, failing because of it, exited before it.

Job id: CHORUS_JOB_ID names the job's shared-memory segments (/dev/shm/chorus-<job id>-*).
chorus-run makes a fresh random one unless the environment already sets it (letters, digits,
'_' and '-'; at most 64). A multi-node job must set the same CHORUS_JOB_ID on every node.
When the ranks have exited, chorus-run removes the segments of its job id that they left
behind; so a chorus-run whose job id (and node rank) a running one on this host holds is
refused with an error naming that one's pid.

Signals: SIGINT, SIGTERM and SIGHUP are forwarded to every rank (each rank runs in its own
process group). Ranks that have not exited a grace period later are terminated. Each rank's
whole process group (a wrapper such as `sh -c` and what it starts) ends with the rank: what is
left of it when the rank exits is killed, and if chorus-run itself is killed (even with
SIGKILL), a guard process it leaves behind kills the groups.

Exit status: 0 when every rank exits 0; otherwise the exit code of the rank that failed first,
or 128 + signal number when it was killed by a signal; 128 + signal when chorus-run was
interrupted; 1 when the job cannot be set up; 2 for a bad command line; 127 when PROGRAM
cannot be executed.

Example, two nodes with four ranks each:
  node0$ export CHORUS_JOB_ID=train42
  node0$ chorus-run -n 4 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 ./train
  node1$ export CHORUS_JOB_ID=train42
  node1$ chorus-run -n 4 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29500 ./train
)";

int parse_int(std::string_view flag, std::string_view text, int min, int max) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || value < min || value > max)
    throw UsageError(
        detail::concat(flag, ": expected an integer in [", min, ", ", max, "], got '", text, "'"));
  return value;
}

double parse_seconds(std::string_view flag, const std::string& text) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value >= 0 && value <= kMaxGraceSeconds))
    throw UsageError(detail::concat(flag, ": expected a number of seconds in [0, ",
                                    kMaxGraceSeconds, "], got '", text, "'"));
  return value;
}

double grace_from_env() {
  try {
    double value = kGrace.get();
    if (!(value >= 0 && value <= kMaxGraceSeconds))
      throw UsageError(detail::concat(kGrace.name(), " must be in [0, ", kMaxGraceSeconds,
                                      "] seconds, got ", value));
    return value;
  } catch (const InvalidArgument& e) {
    throw UsageError(e.message());
  }
}

enum class Flag { kNproc, kNnodes, kNodeRank, kAddr, kPort, kTag, kGrace, kBind, kPrintEnv, kHelp };

struct FlagSpec {
  std::string_view short_name;
  std::string_view long_name;
  Flag flag;
  bool takes_value;
};

constexpr FlagSpec kFlags[] = {
    {"-n", "--nproc-per-node", Flag::kNproc, true},
    {"", "--nnodes", Flag::kNnodes, true},
    {"", "--node-rank", Flag::kNodeRank, true},
    {"", "--master-addr", Flag::kAddr, true},
    {"", "--master-port", Flag::kPort, true},
    {"", "--tag-output", Flag::kTag, false},
    {"", "--grace", Flag::kGrace, true},
    {"", "--bind", Flag::kBind, true},
    {"", "--print-env", Flag::kPrintEnv, false},
    {"-h", "--help", Flag::kHelp, false},
};

// Splits "--name=value" and "-nVALUE" into the flag and its inline value.
const FlagSpec& find_flag(const std::string& arg, std::optional<std::string>& inline_value) {
  std::string_view name = arg;
  if (arg.starts_with("--")) {
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = std::string_view(arg).substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
  } else if (arg.size() > 2) {
    name = std::string_view(arg).substr(0, 2);
    inline_value = arg.substr(2);
  }
  for (const FlagSpec& spec : kFlags)
    if (name == spec.long_name || (!spec.short_name.empty() && name == spec.short_name))
      return spec;
  throw UsageError(detail::concat("unknown option '", name, "'"));
}

void validate(const Options& o, bool addr_given, bool node_rank_given) {
  if (o.nproc_per_node == 0) throw UsageError("-n N (ranks per node) is required");
  if (o.command.empty()) throw UsageError("missing PROGRAM");
  if (o.node_rank >= o.nnodes)
    throw UsageError(
        detail::concat("--node-rank ", o.node_rank, " is not below --nnodes ", o.nnodes));
  if (o.nnodes > 1 && !addr_given)
    throw UsageError("--master-addr (the address of node 0) is required when --nnodes > 1");
  if (o.nnodes > 1 && o.master_port == 0)
    throw UsageError("a fixed --master-port is required when --nnodes > 1");
  if (node_rank_given && o.nnodes == 1 && o.node_rank != 0)
    throw UsageError("--node-rank needs --nnodes");
}

}  // namespace

Options parse_options(std::span<const std::string> args) {
  Options o;
  std::optional<double> grace;
  bool addr_given = false;
  bool node_rank_given = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // PROGRAM
    std::optional<std::string> value;
    const FlagSpec& spec = find_flag(arg, value);
    // Messages name the flag as it was typed.
    const std::string name =
        arg.starts_with("--") ? arg.substr(0, arg.find('=')) : arg.substr(0, 2);
    if (spec.takes_value && !value) {
      if (i + 1 == args.size()) throw UsageError(detail::concat(name, " needs a value"));
      value = args[++i];
    } else if (!spec.takes_value && value) {
      throw UsageError(detail::concat(name, " takes no value"));
    }
    switch (spec.flag) {
      case Flag::kNproc:
        o.nproc_per_node = parse_int(name, *value, 1, kMaxRanksPerNode);
        break;
      case Flag::kNnodes:
        o.nnodes = parse_int(name, *value, 1, kMaxNodes);
        break;
      case Flag::kNodeRank:
        o.node_rank = parse_int(name, *value, 0, kMaxNodes - 1);
        node_rank_given = true;
        break;
      case Flag::kAddr:
        if (value->empty()) throw UsageError("--master-addr: empty address");
        o.master_addr = *value;
        addr_given = true;
        break;
      case Flag::kPort:
        o.master_port = parse_int(name, *value, 0, 65535);
        break;
      case Flag::kTag:
        o.tag_output = true;
        break;
      case Flag::kGrace:
        grace = parse_seconds(name, *value);
        break;
      case Flag::kBind:
        if (*value != "none" && *value != "cores" && *value != "numa")
          throw UsageError(detail::concat("--bind: unknown policy '", *value,
                                          "' (expected none, cores or numa)"));
        o.bind = *value;
        break;
      case Flag::kPrintEnv:
        o.print_env = true;
        break;
      case Flag::kHelp:
        o.help = true;
        break;
    }
  }
  if (o.help || o.print_env) return o;
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  validate(o, addr_given, node_rank_given);
  o.grace_seconds = grace ? *grace : grace_from_env();
  return o;
}

std::string_view usage_synopsis() { return kSynopsis; }

std::string_view help_text() { return kHelp; }

}  // namespace chorus::run
