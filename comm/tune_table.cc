// chorus/tune_table.h: the tune table (algo/tuner.h) and its update from measurements
// (algo/tune_update.h) for the tools.
#include "chorus/tune_table.h"

#include <fstream>
#include <sstream>

#include "algo/cost_fit.h"
#include "algo/tune_update.h"
#include "algo/tuner.h"
#include "chorus/error.h"

namespace chorus {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

bool is_algorithm_name(std::string_view name) { return algo::parse_variant(name).has_value(); }

std::string default_tune_path() { return algo::default_tune_path(); }

bool tuning_enabled() { return algo::tuning_enabled(); }

TableSummary summarize_tune_table(const std::string& file) {
  const algo::TuneTable t =
      file.empty() ? algo::load_tune_table() : algo::TuneTable::parse(read_file(file), file);
  TableSummary out;
  out.origin = t.origin;
  std::istringstream lines(t.format());
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    CurveSummary c;
    f >> c.world_size >> c.collective >> c.algorithm;
    std::string p;
    while (f >> p) ++c.points;
    const bool in_place = c.collective.ends_with("/in-place");
    const std::string name =
        in_place ? c.collective.substr(0, c.collective.find('/')) : c.collective;
    for (int k = 0; k <= static_cast<int>(Collective::kSendRecv); ++k) {
      const auto coll = static_cast<Collective>(k);
      if (to_string(coll) != name) continue;
      const auto ab = t.alpha_beta(c.world_size, coll, *algo::parse_variant(c.algorithm), in_place);
      if (!ab) continue;
      c.alpha_us = ab->first;
      c.beta_us_per_mib = ab->second;
      out.curves.push_back(c);
    }
  }
  return out;
}

std::string fit_costs_of_table(const std::string& file) {
  const algo::TuneTable t = file == "builtin"
                                ? algo::TuneTable::parse(algo::builtin_tune_text(), "built-in")
                                : algo::TuneTable::parse(read_file(file), file);
  return algo::fit_model(t, algo::Link::kShm).format();
}

struct MeasuredTable::Impl {
  algo::TuneTable table;
};

MeasuredTable::MeasuredTable() : impl_(std::make_unique<Impl>()) {}
MeasuredTable::~MeasuredTable() = default;
MeasuredTable::MeasuredTable(MeasuredTable&&) noexcept = default;
MeasuredTable& MeasuredTable::operator=(MeasuredTable&&) noexcept = default;

void MeasuredTable::add(int world_size, Collective coll, std::string_view algorithm,
                        std::vector<TunePoint> curve, bool in_place) {
  const auto v = algo::parse_variant(algorithm);
  CHORUS_ARG_CHECK(v.has_value(), "unknown algorithm '", algorithm, "' (", algo::algorithm_names(),
                   ")");
  std::vector<algo::TuneTable::Point> points;
  points.reserve(curve.size());
  for (const TunePoint& p : curve) points.push_back({p.bytes, p.us});
  algo::fit_non_decreasing(points);
  impl_->table.set(world_size, coll, *v, std::move(points), in_place);
}

bool MeasuredTable::empty() const { return impl_->table.empty(); }

std::string MeasuredTable::format() const { return impl_->table.format(); }

std::string MeasuredTable::merge_into(std::string_view old_text, int world_size,
                                      std::span<const Collective> colls,
                                      std::span<const std::string> algorithms) const {
  return algo::merge_tune_text(old_text, impl_->table,
                               algo::TuneRun{world_size, colls, algorithms});
}

std::string MeasuredTable::fit_costs_into(std::string_view old_text, std::string_view link) const {
  const std::optional<algo::Link> l = algo::parse_link(link);
  CHORUS_ARG_CHECK(l.has_value(), "fit_costs_into: unknown link '", link, "' (shm, ucx, ipc)");
  algo::CostModel m = algo::CostModel::parse(old_text, "the existing constants file");
  m.merge(algo::fit_model(impl_->table, *l));
  return m.format();
}

}  // namespace chorus
