// chorus — fitting the cost model's constants (algo/cost_model.h) to measured times: chorus-tune's
// last step, in the library so that it is tested.
//
// A variant's measured times t_i at sizes b_i are fitted to its form, t = alpha x steps + beta x
// factor x b, by least squares on the relative error (each point weighted by 1 / t_i^2), so that
// the 8-byte points fix alpha and the large ones beta, rather than the largest sizes deciding
// both. Neither constant is negative: where the unconstrained fit would make one so, the other is
// fitted alone.
#pragma once

#include <optional>
#include <span>

#include "algo/cost_model.h"
#include "algo/tuner.h"

namespace chorus::algo {

// The constants of one curve (out-of-place times) of `coll` run as `v` at placement `p`; nullopt
// when the variant has no form there or no point was measured. A form of several terms (hier)
// is fitted with the constants shared by its terms.
std::optional<LinkCost> fit_constants(Collective coll, Variant v, const Placement& p,
                                      std::span<const TuneTable::Point> curve);

// Every curve of `table` fitted (an in-place one as in-place constants), on the link `local` of
// one host, band by band (kBands: each band's constants to the curve's points in it).
CostModel fit_model(const TuneTable& table, Link local);

}  // namespace chorus::algo
