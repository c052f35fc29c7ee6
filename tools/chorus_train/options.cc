#include "options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

#include "chorus/nearest_name.h"
#include "chorus/parallel/replicas.h"

namespace chorus::train {
namespace {

[[noreturn]] void fail(const std::string& message) { throw UsageError{message}; }

int64_t as_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size())
    fail(flag + " expects an integer, got '" + v + "'");
  if (x < lo || x > hi)
    fail(flag + " " + v + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

double as_double(const std::string& flag, const std::string& v, double lo) {
  try {
    size_t used = 0;
    const double x = std::stod(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    if (!(x >= lo)) fail(flag + " " + v + " must be at least " + std::to_string(lo));
    return x;
  } catch (const std::logic_error&) {
    fail(flag + " expects a number, got '" + v + "'");
  }
}

}  // namespace

std::string usage() {
  return R"(Usage: chorus-run -n N chorus-train [flags]

Trains the GPT on a byte corpus at any parallel configuration; rank 0 prints every step.

Mesh (omitted sizes are chosen from the world size and printed with the reason):
  --dp D --tp T --pp P     data x tensor x pipeline parallel ranks (D*T*P = world size)
  --zero S                 0 = DDP (default), 1-3 = ZeRO stage over dp (pipelines, experts:
                           0-2; the experts' state is sharded over the dp ranks holding them)
  --zero-group G           hybrid sharding: ZeRO's shards over groups of G consecutive dp ranks
                           (G divides dp), replicated across the groups; "host": the dp ranks
                           of one host (all of them on one machine); default: all of dp. With
                           --experts, each expert over its ranks inside one group (ep divides G,
                           or G divides ep: each rank's experts then whole)
  --ep N                   expert parallel: each group of N consecutive dp ranks shares every
                           MoE layer's experts, E/N per rank (N divides dp and E; default 1)
  --schedule NAME          gpipe | 1f1b (default) | interleaved
  --chunks V               interleaved: model chunks per stage (default 2)
  --balance B              where the stages are cut: measured (default: each block's and the
                           head's time, at start-up) or uniform (equal blocks per stage)
  --micro-batches M        per step and replica (default: P with a pipeline, else 1)
  --show-schedule          print the schedule of --pp, --micro-batches, --schedule and
                           --chunks stage by stage with its bubble and peak activations, then
                           stop (one process, no ranks); --schedule-svg FILE also draws it
Model:
  --layers L --width C --heads H --context T --vocab V   (default 4, 128, 4, 64, 256)
  --experts E              a mixture of E expert MLPs instead of the dense MLP (default 0:
                           dense); with every parallelism (tp: the MoE layers replicated over
                           the tp ranks), DDP or ZeRO 1-2, --checkpoint-activations, and
                           --dtype bf16 or f16 (f16 as a dense model takes it: DDP, tp=pp=1)
  --top-k K                experts per token, 1 (default) or 2, at most E
  --moe-every N            MoE in every block (1, default) or every N-th (2: blocks 1, 3, ...)
  --capacity-factor F      an expert takes at most ceil(F * tokens * K / E) tokens of a
                           micro-batch, the rest are dropped (default 0: dropless)
  --aux-loss-coef X        the load-balancing loss's weight in the loss (default 1e-2)
  --z-loss-coef X          the router z-loss's weight in the loss (default 1e-3)
Training:
  --batch B                global batch in sequences, split over dp and the micro-batches
                           (default 16): the same command at another mesh sees the same data
  --steps S                (default 50)
  --lr X --min-lr X        cosine schedule peak and floor (default 1e-3, lr/10)
  --warmup N               linear warm-up steps (default min(100, steps/10))
  --lr-steps N             the schedule's length (default --steps; resuming, the checkpoint's):
                           resume with --load and a larger --steps on the same curve
  --clip X                 clip the global gradient norm (default 1.0; 0 = off)
  --weight-decay X         AdamW's (default 0.1; matrices only)
  --dtype f32|bf16|f16     bf16/f16: matmuls under autocast; f16 with loss scaling
  --checkpoint-activations recompute each block in backward
  --deterministic          rank-ordered reductions and pinned kernels (CHORUS_DETERMINISTIC=1):
                           bit-identical reruns; any dp and pp, with or without ep (DDP or
                           ZeRO 1-2), saves the bits of one process with the same --batch in
                           dp x --micro-batches micro-batches
  --seed N                 initialisation and data (default 1234)
  --threads N              compute threads per rank (default: CHORUS_TENSOR_THREADS, else this
                           rank's cores shared among the ranks on its host)
  --device cpu|cuda|cuda:N where each rank computes (default cpu); cuda: the GPU of its local
                           rank (modulo the GPUs, so ranks may share one); cuda:N: GPU N
  --data FILE              train on FILE's bytes (default: the built-in corpus)
Checkpoints and logs:
  --save DIR --save-every K   sharded checkpoint at the end (and every K steps)
  --load DIR               resume from a checkpoint (any mesh, --ep and --zero: it reshards)
  --log-json FILE          one JSON line per step (rank 0)
  --log-memory FILE        every rank's engine peak over the steps and bytes held at the end
                           (what chorus-plan predicts), and the parameter, gradient and
                           optimizer bytes its replicas hold, as one JSON object
  --convert DIR FILE       export a checkpoint as one file of named tensors, or import one
  --convert FILE DIR       as a checkpoint, then stop (one process; anywhere on the line, the
                           other flags then have no effect)
  --trace FILE             a Chrome-trace timeline of every rank's step (Perfetto, chrome://tracing)
  --quiet                  no per-step lines
  --print-env              list every CHORUS_* environment knob of chorus (value, default,
                           meaning) and stop
  -h, --help               this text
)";
}

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  using Setter = std::function<void(const std::string& flag, const std::string& v)>;
  std::map<std::string, std::pair<bool, Setter>> flags;  // flag -> (takes a value, setter)
  auto value = [&](const char* name, Setter set) { flags[name] = {true, std::move(set)}; };
  auto boolean = [&](const char* name, bool* out) {
    flags[name] = {false, [out](const std::string&, const std::string&) { *out = true; }};
  };
  value("--dp", [&](auto& f, auto& v) { o.dp = static_cast<int>(as_int(f, v, 1, 1 << 20)); });
  value("--tp", [&](auto& f, auto& v) { o.tp = static_cast<int>(as_int(f, v, 1, 1 << 20)); });
  value("--pp", [&](auto& f, auto& v) { o.pp = static_cast<int>(as_int(f, v, 1, 1 << 20)); });
  value("--ep", [&](auto& f, auto& v) { o.ep = static_cast<int>(as_int(f, v, 1, 1 << 20)); });
  value("--zero", [&](auto& f, auto& v) { o.zero = static_cast<int>(as_int(f, v, 0, 3)); });
  value("--zero-group", [&](auto& f, auto& v) {
    if (v != "host" && (v.empty() || v.find_first_not_of("0123456789") != std::string::npos))
      fail(f + " " + v + ": expected host or a group size");
    o.zero_group = v == "host" ? -1 : static_cast<int>(as_int(f, v, 1, 1 << 20));
  });
  value("--schedule", [&](auto& f, auto& v) {
    if (v != "gpipe" && v != "1f1b" && v != "interleaved")
      fail(f + " " + v + ": expected gpipe, 1f1b or interleaved");
    o.schedule = v;
  });
  value("--chunks", [&](auto& f, auto& v) { o.chunks = static_cast<int>(as_int(f, v, 1, 64)); });
  value("--balance", [&](auto& f, auto& v) {
    if (v != "measured" && v != "uniform") fail(f + " " + v + ": expected measured or uniform");
    o.balance = v;
  });
  value("--micro-batches",
        [&](auto& f, auto& v) { o.micro_batches = static_cast<int>(as_int(f, v, 1, 1 << 20)); });
  value("--layers", [&](auto& f, auto& v) { o.layers = as_int(f, v, 1, 4096); });
  value("--width", [&](auto& f, auto& v) { o.width = as_int(f, v, 1, 1 << 16); });
  value("--heads", [&](auto& f, auto& v) { o.heads = as_int(f, v, 1, 1 << 10); });
  value("--context", [&](auto& f, auto& v) { o.context = as_int(f, v, 1, 1 << 16); });
  value("--vocab", [&](auto& f, auto& v) { o.vocab = as_int(f, v, 256, 1 << 20); });
  value("--experts", [&](auto& f, auto& v) { o.experts = as_int(f, v, 1, 1 << 16); });
  value("--top-k", [&](auto& f, auto& v) { o.top_k = as_int(f, v, 1, 2); });
  value("--moe-every", [&](auto& f, auto& v) { o.moe_every = as_int(f, v, 1, 4096); });
  value("--capacity-factor", [&](auto& f, auto& v) { o.capacity_factor = as_double(f, v, 0); });
  value("--aux-loss-coef", [&](auto& f, auto& v) { o.aux_loss_coef = as_double(f, v, 0); });
  value("--z-loss-coef", [&](auto& f, auto& v) { o.z_loss_coef = as_double(f, v, 0); });
  value("--batch", [&](auto& f, auto& v) { o.batch = as_int(f, v, 1, 1 << 20); });
  value("--steps", [&](auto& f, auto& v) { o.steps = as_int(f, v, 0, int64_t{1} << 40); });
  value("--lr", [&](auto& f, auto& v) { o.lr = as_double(f, v, 0); });
  value("--lr-steps", [&](auto& f, auto& v) { o.lr_steps = as_int(f, v, 1, int64_t{1} << 40); });
  value("--min-lr", [&](auto& f, auto& v) { o.min_lr = as_double(f, v, 0); });
  value("--warmup", [&](auto& f, auto& v) { o.warmup = as_int(f, v, 0, int64_t{1} << 40); });
  value("--clip", [&](auto& f, auto& v) { o.clip = as_double(f, v, 0); });
  value("--weight-decay", [&](auto& f, auto& v) { o.weight_decay = as_double(f, v, 0); });
  value("--dtype", [&](auto& f, auto& v) {
    if (v != "f32" && v != "bf16" && v != "f16") fail(f + " " + v + ": expected f32, bf16 or f16");
    o.dtype = v;
  });
  value("--seed",
        [&](auto& f, auto& v) { o.seed = static_cast<uint64_t>(as_int(f, v, 0, INT64_MAX)); });
  value("--data", [&](auto&, auto& v) { o.data = v; });
  value("--threads",
        [&](auto& f, auto& v) { o.threads = static_cast<int>(as_int(f, v, 1, 4096)); });
  value("--device", [&](auto& f, auto& v) {
    const bool indexed =
        v.rfind("cuda:", 0) == 0 && v.size() > 5 &&
        std::all_of(v.begin() + 5, v.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (v != "cpu" && v != "cuda" && !indexed) fail(f + " " + v + ": expected cpu, cuda or cuda:N");
    o.device = v;
  });
  value("--save", [&](auto&, auto& v) { o.save = v; });
  value("--load", [&](auto&, auto& v) { o.load = v; });
  value("--save-every",
        [&](auto& f, auto& v) { o.save_every = as_int(f, v, 1, int64_t{1} << 40); });
  value("--log-json", [&](auto&, auto& v) { o.log_json = v; });
  value("--log-memory", [&](auto&, auto& v) { o.log_memory = v; });
  value("--trace", [&](auto&, auto& v) { o.trace = v; });
  boolean("--checkpoint-activations", &o.checkpoint_activations);
  boolean("--deterministic", &o.deterministic);
  boolean("--quiet", &o.quiet);
  boolean("--show-schedule", &o.show_schedule);
  value("--schedule-svg", [&](auto&, auto& v) { o.schedule_svg = v; });

  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--convert") {
      if (i + 2 >= args.size() || args[i + 1].rfind("--", 0) == 0 ||
          args[i + 2].rfind("--", 0) == 0)
        fail(
            "--convert needs a checkpoint directory and a file (export), or a file and a "
            "directory (import)");
      o.convert_from = args[i + 1];
      o.convert_to = args[i + 2];
      i += 2;
      continue;
    }
    std::string flag = args[i], v;
    bool inline_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    auto it = flags.find(flag);
    if (it == flags.end()) {
      std::vector<std::string> names;
      for (const auto& [name, f] : flags) names.push_back(name);
      const NearestName near = nearest_name(flag, names);
      fail("unknown flag '" + flag + "'" +
           (near.distance <= 3 ? " (did you mean " + near.name + "?)"
                               : std::string(" (see --help)")));
    }
    const auto& [takes_value, set] = it->second;
    if (takes_value && !inline_value) {
      if (i + 1 >= args.size()) fail(flag + " needs a value");
      v = args[++i];
    } else if (!takes_value && inline_value) {
      fail(flag + " takes no value");
    }
    set(flag, v);
  }

  if (o.save_every > 0 && o.save.empty()) fail("--save-every needs --save DIR");
  if (!o.schedule_svg.empty() && !o.show_schedule) fail("--schedule-svg needs --show-schedule");
  if (o.min_lr > o.lr) fail("--min-lr is above --lr");
  if (o.zero_group != 0 && o.zero == 0) fail("--zero-group needs --zero 1-3 (DDP shards nothing)");
  if (o.experts == 0) {
    for (const auto& [flag, given] : {std::pair<const char*, bool>{"--top-k", o.top_k != 1},
                                      {"--moe-every", o.moe_every != 1},
                                      {"--capacity-factor", o.capacity_factor != 0},
                                      {"--ep", o.ep != 1}})
      if (given) fail(std::string(flag) + " needs --experts E");
  } else {
    if (o.top_k > o.experts)
      fail("--top-k " + std::to_string(o.top_k) + " exceeds --experts " +
           std::to_string(o.experts) + " (each token goes to K different experts)");
    if (!std::isfinite(o.capacity_factor)) fail("--capacity-factor must be finite");
    if (o.moe_every > o.layers)
      fail("--moe-every " + std::to_string(o.moe_every) + " exceeds the " +
           std::to_string(o.layers) + " layers: no block would have experts");
  }
  return o;
}

Mesh resolve_mesh(const Options& o, int world) {
  Mesh m;
  std::ostringstream why;
  const int tp = o.tp > 0 ? o.tp : 1, pp = o.pp > 0 ? o.pp : 1;
  if (world % (tp * pp) != 0)
    fail("tp=" + std::to_string(tp) + " x pp=" + std::to_string(pp) + " does not divide the " +
         std::to_string(world) + " ranks");
  const int dp = o.dp > 0 ? o.dp : world / (tp * pp);
  if (dp * tp * pp != world)
    fail("mesh dp=" + std::to_string(dp) + " x tp=" + std::to_string(tp) +
         " x pp=" + std::to_string(pp) + " = " + std::to_string(dp * tp * pp) +
         " ranks, but the world has " + std::to_string(world));
  m.dp = dp;
  m.tp = tp;
  m.pp = pp;
  if (o.dp == 0 || o.tp == 0 || o.pp == 0) {
    why << "mesh dp=" << dp << " tp=" << tp << " pp=" << pp;
    if (o.tp == 0 && o.pp == 0)
      why << ": the model fits one rank, so every rank is a data-parallel replica (the cheapest "
             "communication: one gradient reduction per step)";
    else
      why << ": the ranks not taken by tp and pp are data parallel";
  }
  m.reason = why.str();
  m.chunks = o.schedule == "interleaved" ? (o.chunks > 0 ? o.chunks : 2) : 1;
  if (o.schedule != "interleaved" && o.chunks > 1)
    fail("--chunks " + std::to_string(o.chunks) + " needs --schedule interleaved");
  m.micro_batches = o.micro_batches > 0 ? o.micro_batches : pp;
  // What the model and the batch must satisfy.
  if (o.heads % tp != 0)
    fail(std::to_string(o.heads) + " heads do not divide over tp=" + std::to_string(tp));
  if (o.width % o.heads != 0)
    fail("--width " + std::to_string(o.width) + " is not a multiple of --heads " +
         std::to_string(o.heads));
  if (o.layers < static_cast<int64_t>(pp) * m.chunks)
    fail(std::to_string(o.layers) + " layers for " + std::to_string(pp * m.chunks) +
         " pipeline stages (every stage needs a block)");
  if (pp > 1 && m.micro_batches < pp)
    fail("--micro-batches " + std::to_string(m.micro_batches) + " is below the " +
         std::to_string(pp) + " pipeline stages");
  if (pp > 1 && m.chunks > 1 && m.micro_batches % pp != 0)
    fail("the interleaved schedule needs --micro-batches a multiple of pp=" + std::to_string(pp));
  if (pp == 1 && o.schedule == "interleaved")
    fail("--schedule interleaved needs --pp of at least 2");
  if (o.batch % (static_cast<int64_t>(dp) * m.micro_batches) != 0)
    fail("--batch " + std::to_string(o.batch) + " does not split into dp=" + std::to_string(dp) +
         " replicas x " + std::to_string(m.micro_batches) + " micro-batches");
  if (o.zero_group > 0 && dp % o.zero_group != 0)
    fail("--zero-group " + std::to_string(o.zero_group) + " does not divide dp=" +
         std::to_string(dp) + " (the shard groups are runs of consecutive dp ranks)");
  m.ep = o.ep;
  if (o.experts > 0) {
    const std::string ep = std::to_string(o.ep);
    if (dp % o.ep != 0)
      fail("--ep " + ep + " does not divide dp=" + std::to_string(dp) +
           " (the expert groups are carved out of the data-parallel ranks)");
    if (o.experts % o.ep != 0)
      fail(std::to_string(o.experts) + " experts do not divide over --ep " + ep +
           " (every rank holds the same number of experts)");
    if (dp > 1 && o.zero == 3)
      fail(
          "--zero 3 does not take --experts on more than one rank (stage 3 gathers whole blocks "
          "over dp, but an MoE block's experts differ between the ep ranks); use --zero 1 or 2, "
          "which shard the experts' state over the ranks holding the same experts");
    if (dp > 1 && o.zero > 0) {
      // Each expert sharded over its ranks inside one shard group (parallel/replicas.h): the
      // ranks holding the same experts are every ep-th dp rank.
      for (int c = 0; o.zero_group > 0 && c < o.ep; ++c) {
        std::vector<int> members;
        for (int r = c; r < dp; r += o.ep) members.push_back(r);
        std::string ranks;
        for (const int r : members) ranks += (ranks.empty() ? "" : " ") + std::to_string(r);
        if (parallel::expert_shard_group(members, o.zero_group) == 0)
          fail("--zero-group " + std::to_string(o.zero_group) + " does not take --ep " + ep +
               ": the dp ranks holding the same experts (" + ranks +
               ") fall unevenly into its shard groups; take a group size that ep divides or that "
               "divides ep");
      }
    }
  }
  if (o.zero == 3 && (pp > 1 || tp > 1))
    fail("--zero 3 works with data parallelism alone (tp=1, pp=1); use --zero 1 or 2 with tp/pp");
  if (o.dtype == "f16" && (tp > 1 || pp > 1 || o.zero > 0))
    fail(
        "--dtype f16 (loss scaling) needs --zero 0, tp=1 and pp=1: a skipped step must be "
        "decided alike on every rank; use --dtype bf16");
  return m;
}

}  // namespace chorus::train
