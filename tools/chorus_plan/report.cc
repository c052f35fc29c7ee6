#include "report.h"

#include <cstdio>
#include <sstream>

namespace chorus::plan {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string verdict(const MeshPlan& m, const Cluster& c) {
  if (!m.fits) return "OOM";
  return m.memory.peak > 0.9 * c.memory_bytes ? "tight" : "fits";
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

std::string text_report(const Plan& p) {
  const Setup& s = p.setup;
  const Cluster& c = p.cluster;
  std::ostringstream o;
  o << "model " << s.model.name << ": " << parameter_count(s.model) << " parameters ("
    << s.model.layers << " layers, width " << s.model.width << ", " << s.model.heads
    << " heads, context " << s.model.context << ", vocabulary " << s.model.vocab << ")\n";
  if (s.model.experts > 0)
    o << "mixture of experts: " << s.model.experts << " experts in each of "
      << s.model.layers / s.model.moe_every << " of the " << s.model.layers << " blocks"
      << ", top-" << s.model.top_k << ", "
      << (s.model.capacity_factor > 0 ? "capacity factor " + fmt("%g", s.model.capacity_factor)
                                      : std::string("dropless"))
      << "; " << active_parameter_count(s.model) << " parameters active per token\n";
  o << "training: batch " << s.batch << " x " << s.model.context << " tokens, " << s.dtype
    << (s.param_dtype == "bf16" ? " (bf16 parameters, f32 masters)" : "") << ", "
    << (s.zero == 0 ? std::string("DDP") : "ZeRO-" + std::to_string(s.zero))
    << (s.checkpoint_activations ? ", activation checkpointing" : "") << ", " << s.schedule
    << " schedule\n";
  o << "cluster " << c.name << ": " << c.nodes << " node(s) x " << c.per_node << " " << c.device
    << ", " << fmt("%.1f", c.memory_bytes / 1e9) << " GB and "
    << fmt("%.1f", c.flops(s.dtype) / 1e12) << " TFLOP/s " << s.dtype << " each (" << c.source
    << ")\n\n";
  o << "memory per device in GB (the peak rank); step time in ms\n";
  o << "mesh                     micro   params  grads  optim master  activ (ckpt)  comm   peak "
       "verdict | compute    tp bubble   p2p    ep    dp  optim   step  tokens/s   MFU\n";
  for (const MeshPlan& m : p.meshes) {
    char line[512];
    const std::string name = mesh_name(m.mesh);
    if (!m.invalid.empty()) {
      std::snprintf(line, sizeof line, "%-24s cannot run: %s\n", name.c_str(), m.invalid.c_str());
      o << line;
      continue;
    }
    const MemoryEstimate& e = m.memory;
    const StepTime& t = m.time;
    const std::string micro =
        std::to_string(m.mesh.micro_batches) + "x" + std::to_string(m.mesh.micro_batch_size);
    std::snprintf(line, sizeof line,
                  "%-24s %-7s %6.2f %6.2f %6.2f %6.2f %6.2f (%5.2f) %5.2f %6.2f %-7s | %7.1f "
                  "%5.1f %6.1f %5.1f %5.1f %5.1f %6.1f %6.1f %9.0f %4.1f%%\n",
                  name.c_str(), micro.c_str(), e.parameters / 1e9, e.gradients / 1e9,
                  e.optimizer / 1e9, e.master / 1e9, e.activations_full / 1e9,
                  e.activations_checkpointed / 1e9, e.comm_buffers / 1e9, e.peak / 1e9,
                  verdict(m, c).c_str(), 1e3 * t.compute, 1e3 * t.tp, 1e3 * t.bubble, 1e3 * t.p2p,
                  1e3 * t.ep, 1e3 * t.dp, 1e3 * t.optimizer, 1e3 * t.total, t.tokens_per_s,
                  100 * t.mfu);
    o << line;
  }
  o << "\n" << p.reason << "\n";
  return o.str();
}

std::string json_report(const Plan& p) {
  const Setup& s = p.setup;
  const Cluster& c = p.cluster;
  std::ostringstream o;
  o.precision(6);
  o << "{\"model\": {\"name\": " << quoted(s.model.name)
    << ", \"parameters\": " << parameter_count(s.model) << ", \"layers\": " << s.model.layers
    << ", \"width\": " << s.model.width << ", \"heads\": " << s.model.heads
    << ", \"context\": " << s.model.context << ", \"vocab\": " << s.model.vocab
    << ", \"experts\": " << s.model.experts << ", \"top_k\": " << s.model.top_k
    << ", \"moe_every\": " << s.model.moe_every
    << ", \"capacity_factor\": " << s.model.capacity_factor
    << ", \"active_parameters\": " << active_parameter_count(s.model) << "},\n";
  o << " \"setup\": {\"batch\": " << s.batch << ", \"dtype\": " << quoted(s.dtype)
    << ", \"param_dtype\": " << quoted(s.param_dtype) << ", \"zero\": " << s.zero
    << ", \"checkpoint_activations\": " << (s.checkpoint_activations ? "true" : "false")
    << ", \"schedule\": " << quoted(s.schedule) << "},\n";
  o << " \"cluster\": {\"name\": " << quoted(c.name) << ", \"nodes\": " << c.nodes
    << ", \"per_node\": " << c.per_node << ", \"memory_bytes\": " << c.memory_bytes
    << ", \"flops\": " << c.flops(s.dtype) << ", \"source\": " << quoted(c.source) << "},\n";
  o << " \"meshes\": [";
  for (size_t i = 0; i < p.meshes.size(); ++i) {
    const MeshPlan& m = p.meshes[i];
    o << (i ? ",\n  " : "\n  ") << "{\"dp\": " << m.mesh.dp << ", \"tp\": " << m.mesh.tp
      << ", \"pp\": " << m.mesh.pp << ", \"ep\": " << m.mesh.ep;
    if (!m.invalid.empty()) {
      o << ", \"invalid\": " << quoted(m.invalid) << "}";
      continue;
    }
    const MemoryEstimate& e = m.memory;
    const StepTime& t = m.time;
    o << ", \"micro_batches\": " << m.mesh.micro_batches
      << ", \"micro_batch_size\": " << m.mesh.micro_batch_size
      << ", \"memory\": {\"stage\": " << e.stage << ", \"parameters\": " << e.parameters
      << ", \"gradients\": " << e.gradients << ", \"optimizer\": " << e.optimizer
      << ", \"master\": " << e.master << ", \"activations\": " << e.activations
      << ", \"activations_full\": " << e.activations_full
      << ", \"activations_checkpointed\": " << e.activations_checkpointed
      << ", \"comm_buffers\": " << e.comm_buffers << ", \"peak\": " << e.peak
      << "}, \"verdict\": " << quoted(verdict(m, c)) << ", \"time_s\": {\"compute\": " << t.compute
      << ", \"tp\": " << t.tp << ", \"bubble\": " << t.bubble << ", \"p2p\": " << t.p2p
      << ", \"ep\": " << t.ep << ", \"dp\": " << t.dp << ", \"dp_total\": " << t.dp_total
      << ", \"optimizer\": " << t.optimizer << ", \"step\": " << t.total
      << "}, \"tokens_per_s\": " << t.tokens_per_s << ", \"mfu\": " << t.mfu << "}";
  }
  o << "],\n \"recommended\": ";
  if (p.recommended >= 0) {
    const MeshChoice& r = p.meshes[size_t(p.recommended)].mesh;
    o << "{\"dp\": " << r.dp << ", \"tp\": " << r.tp << ", \"pp\": " << r.pp << ", \"ep\": " << r.ep
      << "}";
  } else {
    o << "null";
  }
  o << ",\n \"reason\": " << quoted(p.reason) << "}\n";
  return o.str();
}

}  // namespace chorus::plan
