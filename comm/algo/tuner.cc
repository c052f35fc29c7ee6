#include "algo/tuner.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "algo/host_cache.h"
#include "algo/registry.h"
#include "algo/text_records.h"
#include "chorus/config.h"
#include "chorus/error.h"
#include "chorus/log.h"

namespace chorus::algo {
namespace {

const StringKnob kTuneFile{"CHORUS_TUNE_FILE", "",
                           "tune table rank 0 loads, which then chooses over the cost model "
                           "where it has curves (default: none)"};
const StringKnob kTune{"CHORUS_TUNE", "on",
                       "on = the cost model (fitted by chorus-tune, else its defaults); builtin "
                       "= the built-in tune table over it; off = fixed size thresholds"};

std::optional<Collective> parse_collective(std::string_view name) {
  for (int c = 0; c <= static_cast<int>(Collective::kSendRecv); ++c)
    if (to_string(static_cast<Collective>(c)) == name) return static_cast<Collective>(c);
  return std::nullopt;
}

template <class T>
bool parse_number(std::string_view text, T& out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

TuneTable TuneTable::parse(std::string_view text, std::string_view origin) {
  TuneTable t;
  t.origin = std::string(origin);
  for_each_record(text, [&](int number, std::istringstream& fields) {
    std::string np_text, coll_text, algo_text;
    fields >> np_text;
    const auto bad = [&](const std::string& why) {
      return InvalidArgument(detail::concat("tune table ", origin, " line ", number, ": ", why,
                                            " (expected '<world size> <collective>[/in-place] "
                                            "<algorithm>[/fifo] <bytes>:<us> ...')"));
    };
    int np = 0;
    if (!parse_number(np_text, np) || np < 2) throw bad("bad world size '" + np_text + "'");
    if (!(fields >> coll_text >> algo_text)) throw bad("missing collective or algorithm");
    constexpr std::string_view kInPlace = "/in-place";
    const bool in_place = coll_text.ends_with(kInPlace);
    if (in_place) coll_text.resize(coll_text.size() - kInPlace.size());
    const auto coll = parse_collective(coll_text);
    if (!coll) throw bad("unknown collective '" + coll_text + "'");
    const auto algo = parse_variant(algo_text);
    if (!algo || find_algorithm(*coll, algo->algo) == nullptr)
      throw bad("no algorithm '" + algo_text + "' for " + coll_text);
    std::vector<Point> curve;
    std::string point;
    while (fields >> point) {
      const auto colon = point.find(':');
      Point p{};
      if (colon == std::string::npos ||
          !parse_number(std::string_view(point).substr(0, colon), p.bytes))
        throw bad("bad point '" + point + "'");
      char* end = nullptr;
      const std::string us = point.substr(colon + 1);
      p.us = std::strtod(us.c_str(), &end);
      if (us.empty() || *end != '\0' || !(p.us > 0)) throw bad("bad time in '" + point + "'");
      curve.push_back(p);
    }
    if (curve.empty()) throw bad("no points");
    t.set(np, *coll, *algo, std::move(curve), in_place);
  });
  return t;
}

std::string TuneTable::format() const {
  std::string s;
  for (const auto& [key, curve] : curves_) {
    const auto& [np, coll, in_place, algo] = key;
    s += detail::concat(np, " ", to_string(coll), in_place ? "/in-place " : " ", to_string(algo));
    for (const Point& p : curve) {
      char us[32];
      std::snprintf(us, sizeof us, "%.4g", p.us);
      s += detail::concat(" ", p.bytes, ":", us);
    }
    s += "\n";
  }
  return s;
}

void TuneTable::set(int world_size, Collective coll, Variant algo, std::vector<Point> curve,
                    bool in_place) {
  std::sort(curve.begin(), curve.end(),
            [](const Point& a, const Point& b) { return a.bytes < b.bytes; });
  curves_[{world_size, coll, in_place, algo}] = std::move(curve);
}

bool TuneTable::covers(int world_size, Collective coll) const {
  auto it = curves_.lower_bound({world_size, coll, false, Variant{}});
  return it != curves_.end() && std::get<0>(it->first) == world_size &&
         std::get<1>(it->first) == coll && !std::get<2>(it->first);
}

std::optional<double> TuneTable::predict_us(int world_size, Collective coll, Variant algo,
                                            size_t bytes, bool in_place) const {
  auto it = curves_.find({world_size, coll, in_place, algo});
  if (it == curves_.end()) return std::nullopt;
  const std::vector<Point>& c = it->second;
  if (c.size() == 1 || bytes <= c.front().bytes) return c.front().us;
  // The segment [a, b] holding `bytes`, or the last one beyond the largest measured size.
  size_t i = 1;
  while (i + 1 < c.size() && c[i].bytes < bytes) ++i;
  const Point& a = c[i - 1];
  const Point& b = c[i];
  const double slope = (b.us - a.us) / static_cast<double>(b.bytes - a.bytes);
  const double us = a.us + slope * static_cast<double>(bytes - a.bytes);
  // Beyond the largest size a (noisy) falling last segment must not predict less than it.
  return bytes > b.bytes ? std::max(us, b.us) : us;
}

std::optional<std::pair<double, double>> TuneTable::alpha_beta(int world_size, Collective coll,
                                                               Variant algo, bool in_place) const {
  auto it = curves_.find({world_size, coll, in_place, algo});
  if (it == curves_.end()) return std::nullopt;
  const std::vector<Point>& c = it->second;
  double beta = 0;
  if (c.size() >= 2) {
    const Point& a = c[c.size() - 2];
    const Point& b = c.back();
    beta = (b.us - a.us) / static_cast<double>(b.bytes - a.bytes) * (1 << 20);
  }
  return std::pair{c.front().us, beta};
}

std::optional<Variant> TuneTable::fastest(int world_size, Collective coll, size_t bytes,
                                          std::optional<Variant> preferred, bool in_place,
                                          bool rank_ordered) const {
  const auto predict_us = [&](int w, Collective c, Variant v, size_t b) {
    auto us = in_place ? this->predict_us(w, c, v, b, true) : std::nullopt;
    return us ? us : this->predict_us(w, c, v, b);
  };
  std::optional<Variant> best;
  double best_us = 0;
  for (const AlgoEntry& e : all_algorithms()) {
    if (e.coll != coll || !runs_on_hosts(e.algo, 1)) continue;  // the table is of one host
    if (rank_ordered && !folds_in_rank_order(coll, e.algo)) continue;
    for (Path path : {Path::kSingleCopy, Path::kFifo}) {
      if (path == Path::kFifo && !has_paths(e.algo)) continue;
      const Variant v{e.algo, path};
      auto us = predict_us(world_size, coll, v, bytes);
      if (us && (!best || *us < best_us)) {
        best = v;
        best_us = *us;
      }
    }
  }
  // The FIFO path only where it is clearly faster: below the single-copy threshold the two
  // variants are the same code, and their curves differ by noise alone.
  if (best && best->path == Path::kFifo)
    if (auto us = predict_us(world_size, coll, Variant{best->algo}, bytes);
        us && *us <= best_us * (1 + kTieMargin)) {
      best = Variant{best->algo};
      best_us = *us;
    }
  if (best && preferred && *preferred != *best)
    if (auto us = predict_us(world_size, coll, *preferred, bytes);
        us && *us <= best_us * (1 + kTieMargin))
      return preferred;
  return best;
}

std::optional<Path> TuneTable::path_for(int world_size, Collective coll, Algorithm algo,
                                        size_t bytes, bool in_place) const {
  const auto single = predict_us(world_size, coll, Variant{algo}, bytes, in_place);
  const auto fifo = predict_us(world_size, coll, Variant{algo, Path::kFifo}, bytes, in_place);
  if (!single || !fifo) return std::nullopt;
  return *single <= *fifo ? Path::kSingleCopy : Path::kFifo;
}

std::string default_tune_path() { return host_cache_file("tune"); }

bool tuning_enabled() {
  const std::string v = kTune.get();
  CHORUS_ARG_CHECK(v == "on" || v == "off" || v == "builtin", "CHORUS_TUNE='", v,
                   "' (use on, off or builtin)");
  return v != "off";
}

TuneTable load_tune_table() {
  if (!tuning_enabled()) return TuneTable{};
  const auto named = kTuneFile.get_if_set();
  if (!named) {
    if (kTune.get() == "builtin") return TuneTable::parse(builtin_tune_text(), "built-in");
    return TuneTable{};
  }
  const std::string path = *named;
  std::ifstream f(path);
  CHORUS_ARG_CHECK(f.good(), "CHORUS_TUNE_FILE=", path, " cannot be read");
  std::stringstream text;
  text << f.rdbuf();
  return TuneTable::parse(text.str(), path);
}

}  // namespace chorus::algo
