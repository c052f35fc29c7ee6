#include "algo/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "algo/host_cache.h"
#include "algo/registry.h"
#include "algo/text_records.h"
#include "chorus/config.h"
#include "chorus/error.h"

namespace chorus::algo {
namespace {

const StringKnob kCostFile{"CHORUS_COST_FILE", "",
                           "fitted collective cost constants rank 0 loads (default "
                           "~/.cache/chorus/cost-<host>.txt if chorus-tune wrote one, else the "
                           "model's defaults)"};

constexpr std::string_view kLinkNames[] = {"shm", "ucx", "ipc"};

std::optional<Collective> parse_collective(std::string_view name) {
  for (int c = 0; c <= static_cast<int>(Collective::kSendRecv); ++c)
    if (to_string(static_cast<Collective>(c)) == name) return static_cast<Collective>(c);
  return std::nullopt;
}

double log2_ceil(int n) { return std::ceil(std::log2(static_cast<double>(std::max(1, n)))); }

// The form of a flat algorithm over N ranks: one term.
std::optional<CostForm> flat_form(Collective coll, Algorithm algo, int world_size, Link link) {
  const double n = world_size;
  const double share = (n - 1) / n;  // (N-1)/N
  const auto one = [&](double steps, double factor) {
    CostForm f;
    f.terms[0] = {link, steps, factor};
    f.count = 1;
    return std::optional<CostForm>(f);
  };
  switch (coll) {
    case Collective::kAllReduce:
      switch (algo) {
        case Algorithm::kRing:
          return one(2 * (n - 1), 3 * share);
        case Algorithm::kTree:
          return one(2 * log2_ceil(world_size), 3);
        case Algorithm::kDirect:
          return one(1, 2 * (n - 1));
        case Algorithm::kTwoShot:
          return one(2, 3 * share);
        default:
          return std::nullopt;
      }
    case Collective::kReduceScatter:
      switch (algo) {
        case Algorithm::kRing:
          return one(n - 1, 2 * share);
        case Algorithm::kDirect:
        case Algorithm::kTwoShot:
          return one(1, 2 * share);
        default:
          return std::nullopt;
      }
    case Collective::kAllGather:
      switch (algo) {
        case Algorithm::kRing:
          return one(n - 1, share);
        case Algorithm::kDirect:
        case Algorithm::kFanout:
          return one(1, share);
        default:
          return std::nullopt;
      }
    case Collective::kBroadcast:
      switch (algo) {
        case Algorithm::kRing:
          return one(n - 1, 1);
        case Algorithm::kTree:
          return one(log2_ceil(world_size), std::min(2.0, n - 1));
        case Algorithm::kDirect:
          return one(1, n - 1);
        case Algorithm::kFanout:
          return one(1, 1);
        default:
          return std::nullopt;
      }
    case Collective::kReduce:
      switch (algo) {
        case Algorithm::kRing:
          return one(n - 1, 2);
        case Algorithm::kTree:
          return one(log2_ceil(world_size), 2 * std::min(2.0, n - 1));
        case Algorithm::kDirect:
          return one(1, 2 * (n - 1));
        case Algorithm::kTwoShot:
          return one(2, 3 * share);
        default:
          return std::nullopt;
      }
    default:
      return std::nullopt;
  }
}

}  // namespace

std::string_view to_string(Link l) { return kLinkNames[static_cast<size_t>(l)]; }

std::optional<Link> parse_link(std::string_view name) {
  for (size_t i = 0; i < std::size(kLinkNames); ++i)
    if (kLinkNames[i] == name) return static_cast<Link>(i);
  return std::nullopt;
}

bool chosen_in_place(Collective coll) {
  return coll == Collective::kAllReduce || coll == Collective::kBroadcast;
}

bool probed_in_place(Collective coll) { return coll == Collective::kAllReduce; }

int band_of(size_t bytes) {
  int b = 0;
  while (b + 1 < static_cast<int>(std::size(kBands)) && bytes >= kBands[b + 1]) ++b;
  return b;
}

std::optional<CostForm> form_of(Collective coll, Algorithm algo, const Placement& p) {
  if (p.world_size < 2) return std::nullopt;
  if (!runs_on_hosts(algo, p.hosts)) return std::nullopt;
  if (algo != Algorithm::kHier)
    return flat_form(coll, algo, p.world_size, p.hosts > 1 ? Link::kUcx : p.local);
  if (coll != Collective::kAllReduce) return std::nullopt;
  // Within each host a direct reduce-scatter and all-gather over its g ranks; across hosts a
  // ring of H ranks per rail on 1/g of the buffer.
  const double g = std::max(1, p.world_size / std::max(1, p.hosts));
  const double h = std::max(1, p.hosts);
  CostForm f;
  f.terms[0] = {p.local, 2, 3 * (g - 1) / g};
  f.terms[1] = {Link::kUcx, 2 * (h - 1), 3 * (h - 1) / h / g};
  f.count = 2;
  return f;
}

std::optional<LinkCost> default_link_cost(Link l) {
  switch (l) {
    case Link::kShm:
      return LinkCost{2.0, 256.0};
    case Link::kUcx:
      return LinkCost{20.0, 1024.0};
    case Link::kDeviceIpc:
      return std::nullopt;
  }
  return std::nullopt;
}

CostModel CostModel::parse(std::string_view text, std::string_view origin) {
  CostModel m;
  m.origin = std::string(origin);
  for_each_record(text, [&](int number, std::istringstream& fields) {
    std::string link_text;
    fields >> link_text;
    const auto bad = [&](const std::string& why) {
      return InvalidArgument(detail::concat(
          "cost model ", origin, " line ", number, ": ", why,
          " (expected '<shm|ucx|ipc> <world size> <collective>[/in-place] <algorithm>[/fifo] "
          "<band from bytes> <alpha us per step> <beta us per MiB>')"));
    };
    const auto link = parse_link(link_text);
    if (!link) throw bad("unknown transport '" + link_text + "'");
    int np = 0;
    std::string coll_text, algo_text;
    LinkCost c;
    size_t from = 0;
    if (!(fields >> np >> coll_text >> algo_text >> from >> c.alpha_us >> c.beta_us_per_mib))
      throw bad("missing or malformed fields");
    const auto band = std::find(std::begin(kBands), std::end(kBands), from);
    if (band == std::end(kBands))
      throw bad(detail::concat("no size band starts at ", from, " bytes (0, 32768, 1048576)"));
    std::string extra;
    if (fields >> extra) throw bad("unexpected '" + extra + "'");
    if (np < 2) throw bad(detail::concat("bad world size ", np));
    constexpr std::string_view kInPlace = "/in-place";
    const bool in_place = coll_text.ends_with(kInPlace);
    if (in_place) coll_text.resize(coll_text.size() - kInPlace.size());
    const auto coll = parse_collective(coll_text);
    if (!coll) throw bad("unknown collective '" + coll_text + "'");
    const auto v = parse_variant(algo_text);
    if (!v || find_algorithm(*coll, v->algo) == nullptr)
      throw bad("no algorithm '" + algo_text + "' for " + coll_text);
    if (!(c.alpha_us >= 0) || !(c.beta_us_per_mib >= 0) || !std::isfinite(c.alpha_us) ||
        !std::isfinite(c.beta_us_per_mib))
      throw bad("constants must be finite and not negative");
    m.set(*link, np, *coll, *v, static_cast<int>(band - std::begin(kBands)), c, in_place);
  });
  return m;
}

std::string CostModel::format() const {
  std::string s;
  for (const auto& [key, c] : fitted_) {
    const auto& [link, coll, in_place, v, np, band] = key;
    char consts[64];
    std::snprintf(consts, sizeof consts, "%.4g %.4g", c.alpha_us, c.beta_us_per_mib);
    s += detail::concat(to_string(link), " ", np, " ", to_string(coll), in_place ? "/in-place" : "",
                        " ", to_string(v), " ", kBands[static_cast<size_t>(band)], " ", consts,
                        "\n");
  }
  return s;
}

void CostModel::set(Link link, int world_size, Collective coll, Variant v, int band, LinkCost c,
                    bool in_place) {
  fitted_[{link, coll, in_place, v, world_size, band}] = c;
}

bool CostModel::fitted(Link link, Collective coll) const {
  const auto it = fitted_.lower_bound({link, coll, false, Variant{}, 0, 0});
  return it != fitted_.end() && std::get<0>(it->first) == link && std::get<1>(it->first) == coll;
}

void CostModel::merge(const CostModel& newer) {
  for (const auto& [key, c] : newer.fitted_) fitted_[key] = c;
}

std::optional<LinkCost> CostModel::constants(Link link, int world_size, Collective coll, Variant v,
                                             size_t bytes, bool in_place) const {
  // The fitted entries of (link, coll, in place) are adjacent keys.
  const auto begin_of = [&](bool placed) {
    return fitted_.lower_bound({link, coll, placed, Variant{}, 0, 0});
  };
  const auto in_set = [&](auto it, bool placed) {
    return it != fitted_.end() && std::get<0>(it->first) == link &&
           std::get<1>(it->first) == coll && std::get<2>(it->first) == placed;
  };
  // The nearest world size fitted for the collective (its variants are the candidates there;
  // ties: the smaller), then the nearest band.
  const auto nearest_of = [&](bool placed) -> std::optional<int> {
    std::optional<int> nearest;
    for (auto it = begin_of(placed); in_set(it, placed); ++it) {
      const int np = std::get<4>(it->first);
      if (!nearest || std::abs(np - world_size) < std::abs(*nearest - world_size) ||
          (std::abs(np - world_size) == std::abs(*nearest - world_size) && np < *nearest))
        nearest = np;
    }
    return nearest;
  };
  // In place where the collective has in-place entries at a world size as near as its
  // out-of-place ones' (a size measured only out of place keeps its own constants).
  const std::optional<int> unplaced = nearest_of(false);
  const std::optional<int> placed = in_place ? nearest_of(true) : std::nullopt;
  in_place =
      placed && (!unplaced || std::abs(*placed - world_size) <= std::abs(*unplaced - world_size));
  const auto first = begin_of(in_place);
  const auto in_coll = [&](auto it) { return in_set(it, in_place); };
  const std::optional<int> fitted_at = in_place ? placed : unplaced;
  const bool any_fitted = fitted_at.has_value();
  const int nearest = fitted_at.value_or(0);
  const int band = band_of(bytes);
  const LinkCost* best = nullptr;
  int best_distance = 0;
  for (auto it = first; in_coll(it); ++it) {
    if (std::get<3>(it->first) != v || std::get<4>(it->first) != nearest) continue;
    const int d = std::abs(std::get<5>(it->first) - band);
    if (best == nullptr || d < best_distance) {
      best = &it->second;
      best_distance = d;
    }
  }
  if (best != nullptr) return *best;
  if (any_fitted) return std::nullopt;
  // Unfitted: every variant shares the defaults, so the single-copy one (the FIFO path costs
  // at least as much) is the only candidate.
  if (v.path == Path::kFifo) return std::nullopt;
  return default_link_cost(link);
}

std::optional<double> CostModel::predict_us(Collective coll, Variant v, const Placement& p,
                                            size_t bytes, bool in_place) const {
  const auto form = form_of(coll, v.algo, p);
  if (!form) return std::nullopt;
  double us = 0;
  for (int i = 0; i < form->count; ++i) {
    const CostTerm& t = form->terms[static_cast<size_t>(i)];
    // Across hosts the FIFO path is a host's: the network term of a FIFO variant is its plain
    // one's.
    const Variant on_link = t.link == p.local ? v : Variant{v.algo};
    const auto c = constants(t.link, p.world_size, coll, on_link, bytes, in_place);
    if (!c) return std::nullopt;
    us += c->alpha_us * t.steps +
          c->beta_us_per_mib * t.factor * static_cast<double>(bytes) / double(1 << 20);
  }
  return us;
}

std::string default_cost_path() { return host_cache_file("cost"); }

CostModel load_cost_model() {
  std::string path;
  if (auto p = kCostFile.get_if_set()) {
    path = *p;
  } else {
    path = default_cost_path();
    if (::access(path.c_str(), R_OK) != 0) {
      CostModel m;
      m.origin = "defaults";
      return m;
    }
  }
  std::ifstream f(path);
  CHORUS_ARG_CHECK(f.good(), "CHORUS_COST_FILE=", path, " cannot be read");
  std::stringstream text;
  text << f.rdbuf();
  return CostModel::parse(text.str(), path);
}

}  // namespace chorus::algo
