#include "chorus_bench/options.h"

#include <charconv>
#include <functional>
#include <optional>

#include "chorus/config.h"

namespace chorus::bench {
namespace {

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

// Each flag's handler stores its value or returns why it cannot.
using Handler = std::function<std::string(std::string_view value, Options& options)>;

struct Flag {
  char short_name;
  std::string_view long_name;
  Handler handle;
  bool takes_value = true;  // false: a switch (--explain), which never takes a value
};

Handler size_flag(size_t SizeRange::*field) {
  return [field](std::string_view value, Options& o) -> std::string {
    auto bytes = parse_size(std::string(value));
    if (!bytes) return "expects a size in bytes with an optional K/M/G suffix";
    o.sizes.*field = static_cast<size_t>(*bytes);
    return {};
  };
}

Handler bool_flag(bool Options::*field) {
  return [field](std::string_view value, Options& o) -> std::string {
    if (value != "0" && value != "1") return "expects 0 or 1";
    o.*field = value == "1";
    return {};
  };
}

Handler switch_flag(bool Options::*field) {
  return [field](std::string_view, Options& o) -> std::string {
    o.*field = true;
    return {};
  };
}

Handler int_flag(int Options::*field, int64_t min, int64_t max) {
  return [=](std::string_view value, Options& o) -> std::string {
    auto v = parse_int(value);
    if (!v || *v < min || *v > max)
      return "expects an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
    o.*field = static_cast<int>(*v);
    return {};
  };
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> kFlags = {
      {'b', "minbytes", size_flag(&SizeRange::min_bytes)},
      {'e', "maxbytes", size_flag(&SizeRange::max_bytes)},
      {'f', "stepfactor",
       [](std::string_view value, Options& o) -> std::string {
         auto v = parse_int(value);
         if (!v || *v < 2) return "expects an integer factor >= 2";
         o.sizes.factor = static_cast<uint64_t>(*v);
         return {};
       }},
      {'i', "stepbytes",
       [](std::string_view value, Options& o) -> std::string {
         auto bytes = parse_size(std::string(value));
         if (!bytes || *bytes < 1) return "expects a size in bytes >= 1";
         o.sizes.step_bytes = static_cast<size_t>(*bytes);
         return {};
       }},
      {'n', "iters", int_flag(&Options::iters, 1, 1 << 30)},
      {'w', "warmup_iters", int_flag(&Options::warmup, 0, 1 << 30)},
      {'c', "check", bool_flag(&Options::check)},
      {'z', "blocking", bool_flag(&Options::blocking)},
      {'I', "percentiles", bool_flag(&Options::percentiles)},
      {0, "blocks", int_flag(&Options::blocks, 1, 1000)},
      {'d', "datatype",
       [](std::string_view value, Options& o) -> std::string {
         auto dtype = parse_dtype(value);
         if (!dtype)
           return "expects one of float, double, half, bfloat16, int8, uint8, int32, int64";
         o.dtype = *dtype;
         return {};
       }},
      {'o', "op",
       [](std::string_view value, Options& o) -> std::string {
         auto op = parse_reduce_op(value);
         if (!op) return "expects one of sum, prod, min, max, avg";
         o.op = *op;
         return {};
       }},
      {'r', "root", int_flag(&Options::root, 0, 1 << 30)},
      {0, "algo",
       [](std::string_view value, Options& o) -> std::string {
         if (value.empty()) return "expects an algorithm name";
         o.algorithm = value;
         return {};
       }},
      {0, "json",
       [](std::string_view value, Options& o) -> std::string {
         if (value.empty()) return "expects a file name";
         o.json_path = value;
         return {};
       }},
      {0, "sweep-algos", switch_flag(&Options::sweep_algos), false},
      {0, "explain", switch_flag(&Options::explain), false},
      {0, "device", switch_flag(&Options::device), false},
      {0, "register", switch_flag(&Options::register_memory), false},
  };
  return kFlags;
}

const Flag* find_flag(std::string_view arg, std::optional<std::string_view>& attached) {
  attached.reset();
  if (arg.starts_with("--")) {
    std::string_view name = arg.substr(2);
    if (auto eq = name.find('='); eq != std::string_view::npos) {
      attached = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    for (const Flag& f : flags())
      if (f.long_name == name) return &f;
    return nullptr;
  }
  if (arg.size() < 2) return nullptr;
  if (arg.size() > 2) attached = arg.substr(2);
  for (const Flag& f : flags())
    if (f.short_name != 0 && f.short_name == arg[1]) return &f;
  return nullptr;
}

std::string flag_name(const Flag& f) {
  return f.short_name != 0 ? std::string("-") + f.short_name : "--" + std::string(f.long_name);
}

}  // namespace

ParsedOptions parse_options(std::span<const std::string_view> args) {
  ParsedOptions parsed;
  Options& o = parsed.options;
  const auto fail = [&](std::string message) {
    parsed.error = std::move(message);
    return parsed;
  };
  std::optional<std::string_view> collective;
  bool saw_factor = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "-h" || arg == "--help") {
      parsed.help = true;
      return parsed;
    }
    if (arg == "--print-env") {
      parsed.print_env = true;
      return parsed;
    }
    if (!arg.starts_with("-") || arg == "-") {
      if (collective)
        return fail("more than one collective given ('" + std::string(*collective) + "' and '" +
                    std::string(arg) + "')");
      collective = arg;
      continue;
    }
    std::optional<std::string_view> value;
    const Flag* flag = find_flag(arg, value);
    if (flag == nullptr) return fail("unknown option '" + std::string(arg) + "'");
    if (!flag->takes_value) {
      if (value) return fail(flag_name(*flag) + " takes no value");
      flag->handle({}, o);
      continue;
    }
    if (!value) {
      if (i + 1 == args.size()) return fail(flag_name(*flag) + " needs a value");
      value = args[++i];
    }
    if (std::string why = flag->handle(*value, o); !why.empty())
      return fail(flag_name(*flag) + " " + why + ", got '" + std::string(*value) + "'");
    saw_factor |= flag->short_name == 'f';
  }

  if (!collective) return fail("no collective given");
  if (*collective == "all") {
    o.collectives.assign(std::begin(kAllBenchCollectives), std::end(kAllBenchCollectives));
  } else if (auto c = parse_collective(*collective)) {
    o.collectives = {*c};
  } else {
    return fail("unknown collective '" + std::string(*collective) + "'");
  }
  if (saw_factor && o.sizes.step_bytes > 0) return fail("-f and -i cannot be used together");
  if (o.sweep_algos && !o.algorithm.empty() && o.algorithm != "auto")
    return fail("--sweep-algos runs every algorithm; it cannot be combined with --algo " +
                o.algorithm);
  if (o.register_memory && !o.device) return fail("--register needs --device");
  if (o.blocks > 1 && o.percentiles)
    return fail("--blocks times blocks of calls; -I 1 times each call: use one of them");
  if (o.sizes.max_bytes == 0) return fail("-e must be at least 1 byte");
  if (o.sizes.min_bytes > o.sizes.max_bytes)
    return fail("-b (" + std::to_string(o.sizes.min_bytes) + ") is larger than -e (" +
                std::to_string(o.sizes.max_bytes) + ")");
  return parsed;
}

std::string usage() {
  return R"(usage: chorus-bench COLL [options]

COLL: all_reduce, reduce_scatter, all_gather, broadcast, reduce, gather, scatter, all_to_all,
      sendrecv, or all (each in turn, one table each)

  -b, --minbytes SIZE      smallest size, bytes with an optional K/M/G suffix (default 32M)
  -e, --maxbytes SIZE      largest size (default 32M)
  -f, --stepfactor N       multiply the size by N from one line to the next (default 2)
  -i, --stepbytes SIZE     add SIZE from one line to the next instead
  -n, --iters N            timed iterations per line (default 20)
  -w, --warmup_iters N     untimed iterations before them (default 5)
  -c, --check 0|1          check every output element against its exact value (default 1)
  -z, --blocking 0|1       1: each timed iteration is a blocking call (comm.all_reduce(...));
                           0: issue them all asynchronously, back to back, and wait at the end
                           (default 1, unlike nccl-tests' 0: applications call CPU collectives
                           this way, and the MPI and Gloo benchmarks we compare with time them
                           this way)
  -I, --percentiles 0|1    1: also time each iteration on its own and print p50 and p99 columns
                           (us per call, max over ranks per iteration) (default 0)
      --blocks N           time N blocks of -n calls each and report the median block, as the
                           MPI and Gloo anchors do (each block: max over ranks of the mean per
                           call); a stall inside one block then does not move the line
                           (default 1: one block, its mean, as nccl-tests; not with -I 1)
  -d, --datatype TYPE      float, double, half, bfloat16, int8, uint8, int32, int64 (default float)
  -o, --op OP              sum, prod, min, max, avg (default sum)
  -r, --root N             root of broadcast, reduce, gather and scatter (default 0)
      --algo NAME          force an algorithm (ring, tree, direct, ...: --sweep-algos lists those
                           of each collective), or auto; NAME/fifo (ring/fifo) also copies large
                           messages through shared memory instead of reading them single-copy
      --sweep-algos        for each size, one line per algorithm registered for the collective
                           (and per path: ring and ring/fifo where ranks read each other single-
                           copy), each forced in turn, then one line under auto; * marks the one
                           the selector picks for the size (not with --algo)
      --explain            add a pred column, the predicted time (us; a named tune table's, else
                           the cost model's; with --device over IPC, the ipc constants
                           chorus-tune --device fitted) for the algorithm
                           the line ran ("-": no estimate); without --sweep-algos each line is
                           followed by "#   predicted (us):" with every algorithm's prediction,
                           * marking the one the selector picks
      --device             buffers in GPU memory (CUDA or HIP, as chorus was built), each rank
                           on device CHORUS_LOCAL_RANK % device count; every call is
                           stream-ordered on one stream and waited for through its Work (-z 1:
                           each call; -z 0: all of them at the end); with -c 1 the results are
                           copied back and checked
      --register           with --device: register the buffers with the communicator, so
                           that ranks of one host read them straight through IPC instead of
                           through the communicator's own device buffers (docs/GPU.md)
      --json FILE          rank 0 also writes the parameters and every row to FILE as JSON
      --print-env          list the CHORUS_* knobs linked into chorus-bench (value, default,
                           meaning; chorus-train --print-env lists every knob)
  -h, --help               this text

Sizes are bytes, as in nccl-tests: the per-rank buffer for all_reduce, broadcast, reduce and
sendrecv (each rank sends to rank+1 and receives from rank-1); the total over ranks for the
others, rounded down to a multiple of ranks x element size.

Each line runs the collective out of place and in place (NCCL's in-place layouts; all_to_all and
sendrecv have none). The algorithm column names what the selector chose for the size; under
auto, the root of an in-place broadcast may still send through shared memory where it names a
single-copy variant (its path follows the tune table's in-place curves). With -c 1 the inputs
hold values unique to each rank and index, picked so that every result is exact for the type and
op, and #wrong counts the output elements, summed over ranks, that differ from the exact value.
Timing: after -w untimed iterations and a barrier, the -n timed iterations run back to back, as
blocking calls (-z 1) or issued asynchronously and waited for at the end (-z 0); the title line
says which. time is the largest over ranks of the average time per iteration; algbw = size /
time; busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for the total-size collectives, 1 for
broadcast, reduce and sendrecv. With -I 1, p50 and p99 come from the timed loop itself under
-z 1 (a clock read after every call) and from a second, blocking pass of -n iterations under
-z 0; each iteration's time is the largest over ranks, p50 is the median and p99 the nearest-rank
99th percentile (the maximum below 100 iterations).

Exit status: 0; 1 when an element was wrong or a collective failed; 2 for a bad command line.
)";
}

}  // namespace chorus::bench
