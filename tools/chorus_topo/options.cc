#include "options.h"

#include <charconv>

#include "chorus/error.h"

namespace chorus::topo::cli {
namespace {

constexpr int kMaxHosts = 4096;

constexpr std::string_view kSynopsis =
    "Usage: chorus-topo [--xml FILE]... [--synthetic DESC] [--summary] [--matrix] [--json]\n"
    "                   [--dot] [--svg FILE] [--png FILE] [--mesh dp=D,tp=T,pp=P [--hosts N]]\n";

constexpr std::string_view kHelp =
    R"(Shows how this host is wired, as chorus sees it, and where chorus places the ranks of a job.

Source (default: this host, as hwloc discovers it; hwloc's HWLOC_XMLFILE is honoured):
      --xml FILE         a topology saved with `lstopo --of xml FILE`; repeat it to describe
                         a job over different hosts (one file per host)
      --synthetic DESC   an hwloc synthetic description, e.g. "pack:2 [numa] l3:2 core:8 pu:2"

Views (default: --summary and --matrix):
      --summary          sockets, NUMA nodes, cores, memory, caches, and the tree of PCIe host
                         bridges, switches, GPUs and NICs
      --matrix           the link class between every pair of GPUs, NICs and NUMA nodes, in the
                         style of `nvidia-smi topo -m`, with a legend
      --json             everything above (and the placement) as one JSON document
      --dot              the topology as a Graphviz graph, on stdout
      --svg FILE, --png FILE
                         the same picture drawn by Graphviz's `dot` (which must be installed)

Placement:
      --mesh dp=D,tp=T,pp=P[,order=tp-dp-pp]
                         the table rank -> (host, device, NIC, cores) and the ring order chorus
                         would use for a dp x tp x pp job. Axes left out are 1. The order names
                         the axes fastest-varying first: the default tp-dp-pp is Megatron-LM's
                         (rank = tp + T * (dp + D * pp)).
      --hosts N          the job runs on N hosts like the loaded ones (default 1); the world
                         size D*T*P must be a multiple of the number of hosts
  -h, --help             show this help and exit

Link classes, fastest first: X (same device), NV (NVLink/xGMI), PIX (PCIe switch), PHB (PCIe
host bridge), NODE (same NUMA node), PKG (same socket), SYS (across sockets), NET (across hosts).

Exit status: 0 on success, 1 when the topology cannot be loaded or the mesh does not fit,
2 for a bad command line.

Examples:
  chorus-topo
  lstopo --of xml node.xml && chorus-topo --xml node.xml --mesh dp=2,tp=8 --hosts 2
  chorus-topo --xml node.xml --png node.png
)";

int parse_hosts(const std::string& text) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || value < 1 || value > kMaxHosts)
    throw UsageError(
        detail::concat("--hosts: expected an integer in [1, ", kMaxHosts, "], got '", text, "'"));
  return value;
}

}  // namespace

Options parse_options(std::span<const std::string> args) {
  Options o;
  bool hosts_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> value;
    if (flag.starts_with("--"))
      if (size_t eq = flag.find('='); eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag.resize(eq);
      }
    auto take_value = [&]() -> std::string {
      if (value) return *value;
      if (i + 1 == args.size()) throw UsageError(flag + " needs a value");
      return args[++i];
    };
    auto no_value = [&]() {
      if (value) throw UsageError(flag + " takes no value");
    };
    if (flag == "--xml") {
      o.xml.push_back(take_value());
    } else if (flag == "--synthetic") {
      o.synthetic = take_value();
    } else if (flag == "--summary") {
      no_value(), o.summary = true;
    } else if (flag == "--matrix") {
      no_value(), o.matrix = true;
    } else if (flag == "--json") {
      no_value(), o.json = true;
    } else if (flag == "--dot") {
      no_value(), o.dot = true;
    } else if (flag == "--svg") {
      o.svg = take_value();
    } else if (flag == "--png") {
      o.png = take_value();
    } else if (flag == "--mesh") {
      try {
        o.mesh = parallel::parse_mesh(take_value());
      } catch (const InvalidArgument& e) {
        throw UsageError("--mesh: " + e.message());
      }
    } else if (flag == "--hosts") {
      o.hosts = parse_hosts(take_value());
      hosts_given = true;
    } else if (flag == "-h" || flag == "--help") {
      no_value(), o.help = true;
    } else {
      throw UsageError("unknown option '" + flag + "'");
    }
  }
  if (o.help) return o;
  if (!o.xml.empty() && !o.synthetic.empty())
    throw UsageError("--xml and --synthetic are alternatives; give one");
  if (hosts_given && !o.mesh) throw UsageError("--hosts needs --mesh");
  if (o.json && (o.dot || o.summary || o.matrix))
    throw UsageError("--json prints a document of its own; combine it with no other view");
  return o;
}

std::string_view usage_synopsis() { return kSynopsis; }

std::string_view help_text() { return kHelp; }

}  // namespace chorus::topo::cli
