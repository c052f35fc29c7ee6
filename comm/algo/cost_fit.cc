#include "algo/cost_fit.h"

#include <algorithm>
#include <iterator>
#include <vector>

namespace chorus::algo {

std::optional<LinkCost> fit_constants(Collective coll, Variant v, const Placement& p,
                                      std::span<const TuneTable::Point> curve) {
  const auto form = form_of(coll, v.algo, p);
  if (!form || curve.empty()) return std::nullopt;
  double steps = 0, factor = 0;
  for (int i = 0; i < form->count; ++i) {
    steps += form->terms[static_cast<size_t>(i)].steps;
    factor += form->terms[static_cast<size_t>(i)].factor;
  }
  // t = a u + c x with u = steps, x = factor x MiB, weighted by 1 / t^2.
  double suu = 0, sux = 0, sxx = 0, sut = 0, sxt = 0;
  for (const TuneTable::Point& pt : curve) {
    if (!(pt.us > 0)) continue;
    const double w = 1.0 / (pt.us * pt.us);
    const double u = steps;
    const double x = factor * static_cast<double>(pt.bytes) / double(1 << 20);
    suu += w * u * u;
    sux += w * u * x;
    sxx += w * x * x;
    sut += w * u * pt.us;
    sxt += w * x * pt.us;
  }
  if (suu <= 0) return std::nullopt;
  LinkCost c;
  const double det = suu * sxx - sux * sux;
  if (det > 1e-12 * suu * sxx) {
    c.alpha_us = (sut * sxx - sxt * sux) / det;
    c.beta_us_per_mib = (suu * sxt - sux * sut) / det;
  }
  // One negative (or the points all at one size): the other alone.
  if (!(det > 1e-12 * suu * sxx) || c.alpha_us < 0 || c.beta_us_per_mib < 0) {
    const double alpha_only = sut / suu;
    const double beta_only = sxx > 0 ? sxt / sxx : 0;
    const auto err = [&](double a, double b) {
      double e = 0;
      for (const TuneTable::Point& pt : curve) {
        if (!(pt.us > 0)) continue;
        const double x = factor * static_cast<double>(pt.bytes) / double(1 << 20);
        const double r = (pt.us - a * steps - b * x) / pt.us;
        e += r * r;
      }
      return e;
    };
    c = err(alpha_only, 0) <= err(0, beta_only) || sxx <= 0 ? LinkCost{alpha_only, 0}
                                                            : LinkCost{0, beta_only};
  }
  return c;
}

CostModel fit_model(const TuneTable& table, Link local) {
  CostModel m;
  m.origin = table.origin;
  table.for_each_curve([&](int np, Collective coll, Variant v, bool in_place,
                           const std::vector<TuneTable::Point>& curve) {
    const Placement p{np, 1, local};
    for (int band = 0; band < static_cast<int>(std::size(kBands)); ++band) {
      std::vector<TuneTable::Point> in_band;
      for (const TuneTable::Point& pt : curve)
        if (band_of(pt.bytes) == band) in_band.push_back(pt);
      if (auto c = fit_constants(coll, v, p, in_band))
        m.set(local, np, coll, v, band, *c, in_place);
    }
  });
  return m;
}

}  // namespace chorus::algo
