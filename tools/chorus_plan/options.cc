#include "options.h"

#include <charconv>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>

#include "error.h"

namespace chorus::plan {
namespace {

int64_t as_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size())
    fail(flag + " expects an integer, got '" + v + "'");
  if (x < lo || x > hi)
    fail(flag + " " + v + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

void one_of(const std::string& flag, const std::string& v, const std::vector<std::string>& valid) {
  for (const auto& x : valid)
    if (x == v) return;
  fail_unknown(flag + " value", v, valid);
}

}  // namespace

std::string usage() {
  return R"(Usage: chorus-plan [--model PRESET | shape flags] [set-up flags] [--cluster PRESET]

Predicts, before any job starts, the memory per device and the step time of training a GPT at
every mesh dp x tp x pp that divides the cluster's devices (and, for a mixture of experts, every
ep), and recommends one (docs/PLANNING.md has the formulas and their sources).

Model (default: chorus-train's shape; a preset sets all five, later flags override):
  --model NAME             gpt2-124m, gpt2-350m, gpt2-760m, gpt2-1.5b, gpt-7b, gpt-70b,
                           gpt-1.3b-moe128 (a mixture of 128 experts)
  --layers L --width C --heads H --context T --vocab V
  --experts E              a mixture of E expert MLPs (default 0: dense)
  --top-k K                experts per token, 1 (default) or 2, at most E
  --moe-every N            MoE in every block (1, default) or every N-th
  --capacity-factor F      an expert takes at most ceil(F x tokens x K / E) tokens (default 0:
                           dropless)
  --routing-imbalance X    the busiest ep rank's routed tokens over the mean, minus 1 (e.g. 0.1
                           for a router a load-balancing loss keeps within 10%; default: that of
                           a router not yet balanced, 0.36 at ep 2 with 4 experts); at most F - 1
                           with a capacity factor F
Training (as chorus-train takes them):
  --batch B                global batch in sequences (default 16; presets: 512)
  --micro-batches M        per replica and step (default: searched per mesh)
  --micro-batch-size b     sequences per micro-batch instead (default: searched)
  --dtype D                f32 (default), bf16 or f16 (autocast: f32 parameters)
  --param-dtype D          f32 (default), or bf16: 16-bit parameters and gradients, f32 masters
  --zero S                 0 = DDP (default), 1-3 = ZeRO stage over dp
  --checkpoint-activations recompute blocks in backward
  --no-dp-overlap          the data-parallel reduction after backward instead of beside it (as a
                           trainer without overlapped buckets runs it)
  --unfused-attention      attention's scores through memory (separate softmax and dropout
                           kernels, not a fused attention): priced at the memory bandwidth
  --schedule S             gpipe, 1f1b (default), interleaved
  --chunks V               interleaved: chunks per stage (default 2)
Cluster:
  --cluster NAME           8xh100 (default), 8xh200, 8xmi300x, 8xa100, or local (this machine,
                           one rank per core, measured)
  --nodes N                nodes of the preset (default 1)
  --per-node G             devices per node instead of the preset's (e.g. 1: one GPU)
Mesh (default: every mesh of the world):
  --dp D --tp T --pp P     fix a degree; the others range over what divides the world
  --ep N                   a mixture's expert parallelism (default: every N dividing dp and E)
Output:
  --json                   one JSON object instead of the table
  --svg FILE               also draw the plan: per mesh the step time's parts stacked, and the
                           peak memory against the device's
  --help                   this text
)";
}

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  Setup& s = o.setup;
  bool no_dp_overlap = false;
  s.model.name = "custom";
  std::optional<std::string> preset;
  bool batch_given = false;
  std::map<std::string, std::function<void(const std::string&, const std::string&)>> values;
  std::map<std::string, bool*> booleans = {{"--checkpoint-activations", &s.checkpoint_activations},
                                           {"--json", &o.json},
                                           {"--no-dp-overlap", &no_dp_overlap},
                                           {"--unfused-attention", &s.unfused_attention},
                                           {"--help", &o.help}};
  std::vector<std::pair<std::string, std::string>> shape;  // applied after the preset
  std::vector<std::pair<std::string, std::string>> moe;    // --capacity-factor, after too
  values["--model"] = [&](auto&, auto& v) { preset = v; };
  for (const char* f : {"--layers", "--width", "--heads", "--context", "--vocab", "--experts",
                        "--top-k", "--moe-every"})
    values[f] = [&](auto& flag, auto& v) { shape.emplace_back(flag, v); };
  values["--batch"] = [&](auto& f, auto& v) {
    s.batch = as_int(f, v, 1, int64_t(1) << 40);
    batch_given = true;
  };
  values["--micro-batches"] = [&](auto& f, auto& v) {
    s.micro_batches = int(as_int(f, v, 1, 1 << 20));
  };
  values["--micro-batch-size"] = [&](auto& f, auto& v) {
    s.micro_batch_size = as_int(f, v, 1, int64_t(1) << 30);
  };
  values["--dtype"] = [&](auto& f, auto& v) {
    one_of(f, v, {"f32", "bf16", "f16"});
    s.dtype = v;
  };
  values["--param-dtype"] = [&](auto& f, auto& v) {
    one_of(f, v, {"f32", "bf16"});
    s.param_dtype = v;
  };
  values["--zero"] = [&](auto& f, auto& v) { s.zero = int(as_int(f, v, 0, 3)); };
  values["--schedule"] = [&](auto& f, auto& v) {
    one_of(f, v, {"gpipe", "1f1b", "interleaved"});
    s.schedule = v;
  };
  values["--chunks"] = [&](auto& f, auto& v) { s.chunks = int(as_int(f, v, 2, 64)); };
  values["--cluster"] = [&](auto&, auto& v) { o.cluster = v; };
  values["--nodes"] = [&](auto& f, auto& v) { o.nodes = int(as_int(f, v, 1, 1 << 16)); };
  values["--per-node"] = [&](auto& f, auto& v) { o.per_node = int(as_int(f, v, 1, 1 << 10)); };
  values["--svg"] = [&](auto&, auto& v) { o.svg = v; };
  values["--dp"] = [&](auto& f, auto& v) { o.mesh.dp = int(as_int(f, v, 1, 1 << 20)); };
  values["--tp"] = [&](auto& f, auto& v) { o.mesh.tp = int(as_int(f, v, 1, 1 << 20)); };
  values["--pp"] = [&](auto& f, auto& v) { o.mesh.pp = int(as_int(f, v, 1, 1 << 20)); };
  values["--ep"] = [&](auto& f, auto& v) { o.mesh.ep = int(as_int(f, v, 1, 1 << 20)); };
  values["--capacity-factor"] = [&](auto& f, auto& v) { moe.emplace_back(f, v); };
  values["--routing-imbalance"] = [&](auto& f, auto& v) { moe.emplace_back(f, v); };

  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], v;
    bool inline_value = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    if (auto b = booleans.find(flag); b != booleans.end()) {
      if (inline_value) fail(flag + " takes no value");
      *b->second = true;
      continue;
    }
    auto it = values.find(flag);
    if (it == values.end()) {
      std::vector<std::string> names;
      for (const auto& [n, f] : values) names.push_back(n);
      for (const auto& [n, f] : booleans) names.push_back(n);
      fail("unknown flag '" + flag + "' (did you mean " + nearest(flag, names) + "?)");
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) fail(flag + " needs a value");
      v = args[++i];
    }
    it->second(flag, v);
  }
  s.overlap_dp = !no_dp_overlap;
  if (preset) {
    s.model = model_preset(*preset);
    if (!batch_given) s.batch = 512;
  }
  for (const auto& [flag, v] : shape) {
    const int64_t x = as_int(flag, v, 1, int64_t(1) << 24);
    if (flag == "--layers") s.model.layers = x;
    if (flag == "--width") s.model.width = x;
    if (flag == "--heads") s.model.heads = x;
    if (flag == "--context") s.model.context = x;
    if (flag == "--vocab") s.model.vocab = x;
    if (flag == "--experts") s.model.experts = x;
    if (flag == "--top-k") s.model.top_k = as_int(flag, v, 1, 2);
    if (flag == "--moe-every") s.model.moe_every = x;
  }
  bool reshaped = !shape.empty();  // a shape or capacity factor of its own: not the preset's model
  for (const auto& [flag, v] : moe) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !(x >= 0) || x > 1e6)
      fail(flag + " expects a number >= 0, got '" + v + "'");
    if (flag == "--capacity-factor") {
      s.model.capacity_factor = x;
      reshaped = true;
    }
    if (flag == "--routing-imbalance") s.routing_imbalance = x;
  }
  if (reshaped && preset) s.model.name += " (modified)";
  if (s.model.experts == 0) {
    for (const auto& [flag, v] : shape)
      if (flag == "--top-k" || flag == "--moe-every") fail(flag + " needs --experts E");
    if (!moe.empty()) fail(moe.front().first + " needs --experts E");
    if (o.mesh.ep > 1) fail("--ep needs --experts E");
  } else {
    if (s.model.top_k > s.model.experts)
      fail("--top-k " + std::to_string(s.model.top_k) + " exceeds --experts " +
           std::to_string(s.model.experts) + " (each token goes to K different experts)");
    if (s.model.moe_every > s.model.layers)
      fail("--moe-every " + std::to_string(s.model.moe_every) + " over " +
           std::to_string(s.model.layers) + " layers: no block would have experts");
  }
  if (s.model.width % s.model.heads != 0)
    fail("--width " + std::to_string(s.model.width) + " does not divide into " +
         std::to_string(s.model.heads) + " heads");
  if (s.micro_batches > 0 && s.micro_batch_size > 0)
    fail("--micro-batches and --micro-batch-size say the same thing: give one");
  if (s.schedule != "interleaved") s.chunks = 2;
  return o;
}

}  // namespace chorus::plan
