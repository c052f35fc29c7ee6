// chorus/cost_model.h: the cost model (algo/cost_model.h) for the tools.
#include "chorus/cost_model.h"

#include <fstream>
#include <sstream>

#include "algo/cost_model.h"
#include "algo/selector.h"
#include "chorus/error.h"

namespace chorus {

struct CostModel::Impl {
  algo::CostModel model;
};

std::string default_cost_path() { return algo::default_cost_path(); }

bool chosen_in_place(Collective coll) { return algo::chosen_in_place(coll); }

bool probed_in_place(Collective coll) { return algo::probed_in_place(coll); }

CostModel::CostModel(const std::string& file) : impl_(std::make_unique<Impl>()) {
  if (file.empty()) {
    impl_->model = algo::load_cost_model();
    return;
  }
  std::ifstream f(file);
  CHORUS_ARG_CHECK(f.good(), file, " cannot be read");
  std::stringstream text;
  text << f.rdbuf();
  impl_->model = algo::CostModel::parse(text.str(), file);
}
CostModel::~CostModel() = default;
CostModel::CostModel(CostModel&&) noexcept = default;
CostModel& CostModel::operator=(CostModel&&) noexcept = default;

const std::string& CostModel::origin() const { return impl_->model.origin; }
bool CostModel::fitted() const { return !impl_->model.empty(); }

std::vector<FittedCost> CostModel::entries() const {
  std::vector<FittedCost> out;
  std::istringstream lines(impl_->model.format());
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    FittedCost c;
    f >> c.link >> c.world_size >> c.collective >> c.algorithm >> c.band_from_bytes >> c.alpha_us >>
        c.beta_us_per_mib;
    out.push_back(c);
  }
  return out;
}

std::optional<CostModel::Choice> CostModel::fastest(Collective coll, int world_size,
                                                    double bytes) const {
  // The selector's own choice on one host of shared memory, every path a candidate.
  algo::SelectContext s;
  s.caps.world_size = world_size;
  s.model = &impl_->model;
  s.fifo_from_bytes = 1;
  const size_t b = bytes > 0 ? static_cast<size_t>(bytes) : 0;
  const auto v = algo::model_choice(s, coll, b);
  if (!v) return std::nullopt;
  const auto us = impl_->model.predict_us(coll, *v, algo::Placement{world_size, 1}, b,
                                          algo::chosen_in_place(coll));
  if (!us) return std::nullopt;
  return Choice{std::string(algo::to_string(*v)), *us};
}

}  // namespace chorus
