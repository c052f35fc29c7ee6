#include "chorus_bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "chorus_bench/collective_case.h"

namespace chorus::bench {
namespace {

std::string printf_string(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printf_string(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  return std::string(buffer, static_cast<size_t>(std::max(0, std::min<int>(n, sizeof buffer - 1))));
}

std::string op_name(const std::optional<ReduceOp>& op) {
  return op ? std::string(to_string(*op)) : "none";
}

// The algorithm column: one name, or "out/in" when the placements ran different ones.
std::string algorithm_cell(const Row& row) {
  const std::string& out = row.out_of_place.algorithm;
  const std::string& in = row.in_place.algorithm;
  if (!row.in_place.available || in.empty() || in == out) return out.empty() ? "-" : out;
  return (out.empty() ? "-" : out) + "/" + in;
}

// The algorithm column of a --sweep-algos line: what ran, " *" when the selector picks it for
// this size; on the auto line "auto (ring)".
std::string sweep_algorithm_cell(const Row& row) {
  if (row.forced == "auto") return "auto (" + algorithm_cell(row) + ")";
  return algorithm_cell(row) + (row.selected ? " *" : "");
}

// A time in a column of its own, "-" when absent (< 0 or nullopt).
std::string optional_time(std::optional<double> time_us) {
  if (!time_us || *time_us < 0 || !std::isfinite(*time_us)) return "-";
  const std::string t = format_time(*time_us);
  return t.substr(t.find_first_not_of(' '));
}

// Each placement block: 33 columns, plus 18 for p50/p99 with -I 1.
constexpr size_t kBlockWidth = 33;
constexpr size_t kPercentileWidth = 18;

std::string measurement_cells(const Measurement& m, bool percentiles) {
  if (!m.available) {
    std::string s = printf_string("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    if (percentiles) s += printf_string("  %7s  %7s", "N/A", "N/A");
    return s;
  }
  const std::string wrong = m.wrong ? std::to_string(*m.wrong) : "N/A";
  std::string s = printf_string("  %7s  %6.2f  %6.2f  %6s", format_time(m.time_us).c_str(),
                                m.algbw_gbps, m.busbw_gbps, wrong.c_str());
  if (percentiles)
    s += printf_string("  %7s  %7s", optional_time(m.p50_us).c_str(),
                       optional_time(m.p99_us).c_str());
  return s;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += printf_string("\\u%04x", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// JSON has no NaN or infinity.
std::string json_number(double v, const char* format) {
  return std::isfinite(v) ? printf_string(format, v) : "null";
}

// [{"algorithm": "ring", "predicted_us": 12.3, "chosen": true}, ...]; null for no estimate.
std::string json_estimates(const std::vector<Estimate>& estimates) {
  std::string s = "[";
  for (size_t i = 0; i < estimates.size(); ++i) {
    const Estimate& e = estimates[i];
    s += (i ? ", " : "") + std::string("{\"algorithm\": ") + json_string(e.algorithm);
    s += ", \"predicted_us\": " +
         (e.predicted_us < 0 ? std::string("null") : json_number(e.predicted_us, "%.3f"));
    s += std::string(", \"chosen\": ") + (e.chosen ? "true" : "false") + "}";
  }
  return s + "]";
}

}  // namespace

Measurement make_measurement(BenchCollective c, int world_size, size_t bytes, double time_us) {
  Measurement m;
  m.available = true;
  m.time_us = time_us;
  m.algbw_gbps = time_us > 0 ? static_cast<double>(bytes) / time_us / 1e3 : 0;
  m.busbw_gbps = m.algbw_gbps * bus_factor(c, world_size);
  return m;
}

std::string format_time(double time_us) {
  if (time_us >= 10000.0) return printf_string("%7.0f", time_us);
  if (time_us >= 100.0) return printf_string("%7.1f", time_us);
  return printf_string("%7.2f", time_us);
}

std::string format_table_header(const TableInfo& info) {
  std::string s = printf_string(
      "# chorus-bench: %s, %d ranks, %s, %s, %s, %d warmup, algo %s, %s\n",
      std::string(to_string(info.collective)).c_str(), info.world_size,
      std::string(to_string(info.dtype)).c_str(), op_name(info.op).c_str(),
      (info.blocks > 1 ? printf_string("%d blocks x %d iters", info.blocks, info.iters)
                       : printf_string("%d iters", info.iters))
          .c_str(),
      info.warmup,
      info.sweep_algos         ? "sweep"
      : info.algorithm.empty() ? "auto"
                               : info.algorithm.c_str(),
      info.blocking ? "blocking" : "non-blocking");
  if (info.device)
    s.insert(s.size() - 1, info.registered ? ", device memory (stream-ordered, registered)"
                                           : ", device memory (stream-ordered)");
  if (info.sweep_algos)
    s += "# every algorithm forced in turn, then auto; * = the selector's choice for the size\n";
  s += "#\n";
  // 52 columns of row description, then two placement blocks, each titled in the middle.
  const size_t block = kBlockWidth + (info.percentiles ? kPercentileWidth : 0);
  std::string titles(52, ' ');
  titles[0] = '#';
  for (std::string_view title : {"out-of-place", "in-place"}) {
    const size_t left = (block - title.size()) / 2;
    titles +=
        std::string(left, ' ') + std::string(title) + std::string(block - left - title.size(), ' ');
  }
  s += titles.substr(0, titles.find_last_not_of(' ') + 1) + "\n";
  s += printf_string("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  for (int p = 0; p < 2; ++p) {
    s += printf_string("  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
    if (info.percentiles) s += printf_string("  %7s  %7s", "p50", "p99");
  }
  if (info.explain) s += printf_string("  %7s", "pred");
  s += "  algo\n";
  s += printf_string("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  for (int p = 0; p < 2; ++p) {
    s += printf_string("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
    if (info.percentiles) s += printf_string("  %7s  %7s", "(us)", "(us)");
  }
  if (info.explain) s += printf_string("  %7s", "(us)");
  s.erase(s.find_last_not_of(' ') + 1);
  return s + "\n";
}

std::string format_row(const Row& row, const TableInfo& info) {
  std::string s =
      printf_string("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count,
                    std::string(to_string(row.dtype)).c_str(), op_name(row.op).c_str(), row.root);
  s += measurement_cells(row.out_of_place, info.percentiles);
  s += measurement_cells(row.in_place, info.percentiles);
  if (info.explain) s += printf_string("  %7s", optional_time(row.predicted_us).c_str());
  s += "  " + (info.sweep_algos ? sweep_algorithm_cell(row) : algorithm_cell(row)) + "\n";
  if (info.explain && !info.sweep_algos) s += format_predictions(row.estimates);
  return s;
}

std::string format_row(const Row& row) { return format_row(row, TableInfo{}); }

std::string format_predictions(const std::vector<Estimate>& estimates) {
  std::string s = "#   predicted (us):";
  for (const Estimate& e : estimates)
    s += "  " + e.algorithm + (e.chosen ? "* " : " ") + optional_time(e.predicted_us);
  if (estimates.empty()) s += "  (no algorithm registered)";
  return s + "\n";
}

double percentile_median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

double percentile_99(std::vector<double> samples) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  // Nearest rank: the smallest value with at least 99% of the samples at or below it.
  const size_t rank = (samples.size() * 99 + 99) / 100;
  return samples[std::max<size_t>(rank, 1) - 1];
}

uint64_t total_wrong(const std::vector<Row>& rows) {
  uint64_t wrong = 0;
  for (const Row& row : rows)
    for (const Measurement* m : {&row.out_of_place, &row.in_place})
      if (m->available) wrong += m->wrong.value_or(0);
  return wrong;
}

double average_busbw(const std::vector<Row>& rows) {
  double sum = 0;
  int n = 0;
  for (const Row& row : rows)
    for (const Measurement* m : {&row.out_of_place, &row.in_place})
      if (m->available) {
        sum += m->busbw_gbps;
        ++n;
      }
  return n > 0 ? sum / n : 0;
}

std::string format_footer(const std::vector<Row>& rows) {
  const uint64_t wrong = total_wrong(rows);
  return printf_string("# %-20s : %llu %s\n# %-20s : %g\n#\n", "Out of bounds values",
                       static_cast<unsigned long long>(wrong), wrong == 0 ? "OK" : "FAILED",
                       "Avg bus bandwidth", average_busbw(rows));
}

std::string format_json(const Options& options, int world_size, const std::vector<Row>& rows) {
  std::string s = "{\n  \"benchmark\": \"chorus-bench\",\n";
  s += "  \"collectives\": [";
  for (size_t i = 0; i < options.collectives.size(); ++i)
    s += (i ? ", " : "") + json_string(to_string(options.collectives[i]));
  s += "],\n";
  s += printf_string("  \"world_size\": %d,\n", world_size);
  s += "  \"dtype\": " + json_string(to_string(options.dtype)) + ",\n";
  s += "  \"op\": " + json_string(to_string(options.op)) + ",\n";
  s += printf_string("  \"root\": %d,\n", options.root);
  s += printf_string("  \"min_bytes\": %zu,\n  \"max_bytes\": %zu,\n", options.sizes.min_bytes,
                     options.sizes.max_bytes);
  if (options.sizes.step_bytes > 0)
    s += printf_string("  \"step_bytes\": %zu,\n", options.sizes.step_bytes);
  else
    s += printf_string("  \"step_factor\": %llu,\n",
                       static_cast<unsigned long long>(options.sizes.factor));
  s += printf_string("  \"iters\": %d,\n  \"blocks\": %d,\n  \"warmup\": %d,\n", options.iters,
                     options.blocks, options.warmup);
  s += std::string("  \"check\": ") + (options.check ? "true" : "false") + ",\n";
  s += "  \"algorithm\": " + json_string(options.algorithm.empty() ? "auto" : options.algorithm) +
       ",\n";
  s += std::string("  \"blocking\": ") + (options.blocking ? "true" : "false") + ",\n";
  s += std::string("  \"timing\": \"") +
       (options.blocking ? "blocking calls back to back"
                         : "async back-to-back, waited for at the end") +
       ", max over ranks of the mean per iteration" +
       (options.blocks > 1 ? ", median over the timed blocks" : "") + "\",\n";
  s += std::string("  \"percentiles\": ") + (options.percentiles ? "true" : "false") + ",\n";
  s += std::string("  \"sweep_algos\": ") + (options.sweep_algos ? "true" : "false") + ",\n";
  s += std::string("  \"explain\": ") + (options.explain ? "true" : "false") + ",\n";
  s += std::string("  \"device\": ") + (options.device ? "true" : "false") + ",\n";
  s += std::string("  \"registered\": ") + (options.register_memory ? "true" : "false") + ",\n";
  s += printf_string("  \"out_of_bounds\": %llu,\n",
                     static_cast<unsigned long long>(total_wrong(rows)));
  s += "  \"avg_busbw_gbps\": " + json_number(average_busbw(rows), "%.6f") + ",\n";
  s += "  \"rows\": [";
  bool first = true;
  for (const Row& row : rows) {
    for (Placement p : {Placement::kOutOfPlace, Placement::kInPlace}) {
      const Measurement& m = p == Placement::kInPlace ? row.in_place : row.out_of_place;
      if (!m.available) continue;
      s += first ? "\n" : ",\n";
      first = false;
      s += "    {\"collective\": " + json_string(to_string(row.collective));
      s += printf_string(", \"size\": %zu, \"count\": %zu", row.bytes, row.count);
      s += ", \"type\": " + json_string(to_string(row.dtype));
      s += ", \"redop\": " + json_string(op_name(row.op));
      s += printf_string(", \"root\": %d", row.root);
      s += ", \"placement\": " + json_string(to_string(p));
      s += ", \"time_us\": " + json_number(m.time_us, "%.3f");
      s += ", \"algbw_gbps\": " + json_number(m.algbw_gbps, "%.6f");
      s += ", \"busbw_gbps\": " + json_number(m.busbw_gbps, "%.6f");
      s += ", \"wrong\": " + (m.wrong ? std::to_string(*m.wrong) : std::string("null"));
      s += ", \"algorithm\": " + json_string(m.algorithm);
      if (m.p50_us) s += ", \"p50_us\": " + json_number(*m.p50_us, "%.3f");
      if (m.p99_us) s += ", \"p99_us\": " + json_number(*m.p99_us, "%.3f");
      if (!row.forced.empty()) {
        s += ", \"forced\": " + json_string(row.forced);
        s += std::string(", \"selected\": ") + (row.selected ? "true" : "false");
      }
      if (row.predicted_us)
        s += ", \"predicted_us\": " +
             (*row.predicted_us < 0 ? std::string("null") : json_number(*row.predicted_us, "%.3f"));
      if (!row.estimates.empty()) s += ", \"estimates\": " + json_estimates(row.estimates);
      s += "}";
    }
  }
  s += first ? "]\n}\n" : "\n  ]\n}\n";
  return s;
}

}  // namespace chorus::bench
