#include "chorus_bench/report.h"

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

std::string measurement_cells(const Measurement& m) {
  if (!m.available) return printf_string("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
  const std::string wrong = m.wrong ? std::to_string(*m.wrong) : "N/A";
  return printf_string("  %7s  %6.2f  %6.2f  %6s", format_time(m.time_us).c_str(), m.algbw_gbps,
                       m.busbw_gbps, wrong.c_str());
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
      "# chorus-bench: %s, %d ranks, %s, %s, %d iters, %d warmup, algo %s\n#\n",
      std::string(to_string(info.collective)).c_str(), info.world_size,
      std::string(to_string(info.dtype)).c_str(), op_name(info.op).c_str(), info.iters, info.warmup,
      info.algorithm.empty() ? "auto" : info.algorithm.c_str());
  // 52 columns of row description, then two 33-column placement blocks, each titled in the
  // middle.
  std::string titles(52, ' ');
  titles[0] = '#';
  for (std::string_view title : {"out-of-place", "in-place"}) {
    const size_t left = (33 - title.size()) / 2;
    titles +=
        std::string(left, ' ') + std::string(title) + std::string(33 - left - title.size(), ' ');
  }
  s += titles.substr(0, titles.find_last_not_of(' ') + 1) + "\n";
  s += printf_string("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  for (int p = 0; p < 2; ++p)
    s += printf_string("  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
  s += "  algo\n";
  s += printf_string("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  for (int p = 0; p < 2; ++p)
    s += printf_string("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
  s.erase(s.find_last_not_of(' ') + 1);
  return s + "\n";
}

std::string format_row(const Row& row) {
  std::string s =
      printf_string("%12zu  %12zu  %8s  %6s  %6d", row.bytes, row.count,
                    std::string(to_string(row.dtype)).c_str(), op_name(row.op).c_str(), row.root);
  s += measurement_cells(row.out_of_place);
  s += measurement_cells(row.in_place);
  return s + "  " + algorithm_cell(row) + "\n";
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
  s += printf_string("  \"iters\": %d,\n  \"warmup\": %d,\n", options.iters, options.warmup);
  s += std::string("  \"check\": ") + (options.check ? "true" : "false") + ",\n";
  s += "  \"algorithm\": " + json_string(options.algorithm.empty() ? "auto" : options.algorithm) +
       ",\n";
  s += "  \"timing\": \"async back-to-back, max over ranks of the mean per iteration\",\n";
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
      s += ", \"algorithm\": " + json_string(m.algorithm) + "}";
    }
  }
  s += first ? "]\n}\n" : "\n  ]\n}\n";
  return s;
}

}  // namespace chorus::bench
