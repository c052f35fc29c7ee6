#include "chart.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

namespace chorus::plan {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

std::string svg_chart(const Plan& p) {
  std::vector<const MeshPlan*> rows;
  for (const MeshPlan& m : p.meshes)
    if (m.invalid.empty()) rows.push_back(&m);
  const double row_h = 22, left = 150, time_w = 520, gap = 40, mem_w = 220, top = 50;
  const double width = left + time_w + gap + mem_w + 20;
  const double height = top + row_h * double(rows.size()) + 40;
  double max_step = 0, max_mem = p.cluster.memory_bytes;
  for (const MeshPlan* m : rows) {
    max_step = std::max(max_step, m->time.total);
    max_mem = std::max(max_mem, m->memory.peak);
  }
  const std::vector<std::pair<const char*, const char*>> parts = {
      {"compute", "#4e79a7"}, {"tp", "#f28e2b"}, {"bubble", "#e15759"},
      {"p2p", "#76b7b2"},     {"dp", "#59a14f"}, {"optimizer", "#b07aa1"}};
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\""
    << num(height) << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"10\" y=\"18\" font-size=\"14\">" << p.setup.model.name << " on " << p.cluster.name
    << ", " << p.cluster.nodes << " node(s): step time (ms) and peak memory per device"
    << "</text>\n";
  double x = left;
  for (const auto& [name, color] : parts) {
    o << "<rect x=\"" << num(x) << "\" y=\"28\" width=\"10\" height=\"10\" fill=\"" << color
      << "\"/><text x=\"" << num(x + 14) << "\" y=\"37\">" << name << "</text>\n";
    x += 80;
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const MeshPlan& m = *rows[i];
    const double y = top + row_h * double(i);
    o << "<text x=\"10\" y=\"" << num(y + 14) << "\">" << mesh_name(m.mesh) << "</text>\n";
    const double values[] = {m.time.compute, m.time.tp, m.time.bubble,
                             m.time.p2p,     m.time.dp, m.time.optimizer};
    double at = left;
    for (size_t k = 0; k < parts.size(); ++k) {
      const double w = max_step > 0 ? values[k] / max_step * time_w : 0;
      if (w <= 0) continue;
      o << "<rect x=\"" << num(at) << "\" y=\"" << num(y + 3) << "\" width=\"" << num(w)
        << "\" height=\"" << num(row_h - 6) << "\" fill=\"" << parts[k].second << "\"/>\n";
      at += w;
    }
    o << "<text x=\"" << num(at + 4) << "\" y=\"" << num(y + 14) << "\">" << num(1e3 * m.time.total)
      << "</text>\n";
    const double mx = left + time_w + gap;
    o << "<rect x=\"" << num(mx) << "\" y=\"" << num(y + 3) << "\" width=\""
      << num(m.memory.peak / max_mem * mem_w) << "\" height=\"" << num(row_h - 6) << "\" fill=\""
      << (m.fits ? "#9c9c9c" : "#d62728") << "\"/>\n";
  }
  const double mx = left + time_w + gap + p.cluster.memory_bytes / max_mem * mem_w;
  o << "<line x1=\"" << num(mx) << "\" y1=\"" << num(top) << "\" x2=\"" << num(mx) << "\" y2=\""
    << num(top + row_h * double(rows.size())) << "\" stroke=\"black\" stroke-dasharray=\"4\"/>\n"
    << "<text x=\"" << num(left + time_w + gap) << "\" y=\""
    << num(top + row_h * double(rows.size()) + 16)
    << "\">peak memory; dashed: " << num(p.cluster.memory_bytes / 1e9)
    << " GB per device</text>\n</svg>\n";
  return o.str();
}

}  // namespace chorus::plan
