#include "chorus_bench/report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

namespace chorus::bench {
namespace {

Row sample_row() {
  Row row;
  row.collective = BenchCollective::kAllReduce;
  row.bytes = 1 << 20;
  row.count = row.bytes / 4;
  row.op = ReduceOp::kSum;
  row.out_of_place = make_measurement(row.collective, 4, row.bytes, 123.456);
  row.out_of_place.wrong = 0;
  row.out_of_place.algorithm = "ring";
  row.in_place = make_measurement(row.collective, 4, row.bytes, 99.5);
  row.in_place.wrong = 3;
  row.in_place.algorithm = "ring";
  return row;
}

TEST(Report, BandwidthDefinitions) {
  // 1 GB in 1 s: algbw 1 GB/s; busbw scales by nccl-tests' factor.
  const Measurement ar = make_measurement(BenchCollective::kAllReduce, 4, 1000000000, 1e6);
  EXPECT_DOUBLE_EQ(ar.algbw_gbps, 1.0);
  EXPECT_DOUBLE_EQ(ar.busbw_gbps, 1.5);
  const Measurement ag = make_measurement(BenchCollective::kAllGather, 4, 1000000000, 1e6);
  EXPECT_DOUBLE_EQ(ag.busbw_gbps, 0.75);
  const Measurement bc = make_measurement(BenchCollective::kBroadcast, 4, 2000000, 1000);
  EXPECT_DOUBLE_EQ(bc.algbw_gbps, 2.0);
  EXPECT_DOUBLE_EQ(bc.busbw_gbps, 2.0);
  EXPECT_TRUE(bc.available);
  EXPECT_FALSE(bc.wrong.has_value());
}

TEST(Report, TimeHasNcclTestsPrecision) {
  EXPECT_EQ(format_time(3.14159), "   3.14");
  EXPECT_EQ(format_time(99.994), "  99.99");
  EXPECT_EQ(format_time(123.456), "  123.5");
  EXPECT_EQ(format_time(9999.94), " 9999.9");
  EXPECT_EQ(format_time(123456.7), " 123457");
}

TEST(Report, RowColumns) {
  EXPECT_EQ(format_row(sample_row()),
            "     1048576        262144     float     sum      -1"
            "    123.5    8.49   12.74       0"
            "    99.50   10.54   15.81       3  ring\n");
}

TEST(Report, RowWithoutInPlaceOrCheck) {
  Row row;
  row.collective = BenchCollective::kSendRecv;
  row.bytes = 64;
  row.count = 16;
  row.out_of_place = make_measurement(row.collective, 2, row.bytes, 10);
  row.out_of_place.algorithm = "direct";
  EXPECT_EQ(format_row(row),
            "          64            16     float    none      -1"
            "    10.00    0.01    0.01     N/A"
            "      N/A     N/A     N/A     N/A  direct\n");
}

TEST(Report, AlgorithmColumnShowsBothWhenPlacementsDiffer) {
  Row row = sample_row();
  row.in_place.algorithm = "tree";
  const std::string line = format_row(row);
  EXPECT_EQ(line.substr(line.size() - 12), "  ring/tree\n");
}

TEST(Report, HeaderLinesUpWithRows) {
  const std::string header = format_table_header(
      {BenchCollective::kAllReduce, 4, DataType::kF32, ReduceOp::kSum, 20, 5, ""});
  EXPECT_EQ(header.substr(0, header.find('\n')),
            "# chorus-bench: all_reduce, 4 ranks, float, sum, 20 iters, 5 warmup, algo auto, "
            "blocking");
  // Every column title ends where the row's value ends.
  const std::string row = format_row(sample_row());
  const size_t titles = header.find("#       size");
  ASSERT_NE(titles, std::string::npos);
  const std::string title_line = header.substr(titles, header.find('\n', titles) - titles);
  EXPECT_EQ(title_line,
            "#       size         count      type   redop    root"
            "     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong  algo");
  for (size_t end : {12u, 26u, 36u, 44u, 52u, 61u, 69u, 77u, 85u, 94u, 102u, 110u, 118u}) {
    EXPECT_NE(title_line[end - 1], ' ') << end;
    EXPECT_NE(row[end - 1], ' ') << end;
    EXPECT_EQ(row[end], ' ') << end;
  }
}

TableInfo all_columns() {
  TableInfo info{BenchCollective::kAllReduce, 4, DataType::kF32, ReduceOp::kSum, 20, 5, ""};
  info.percentiles = true;
  info.explain = true;
  return info;
}

Row row_with_extras() {
  Row row = sample_row();
  row.out_of_place.p50_us = 120.3;
  row.out_of_place.p99_us = 250.0;
  row.in_place.p50_us = 98.5;
  row.in_place.p99_us = 12345.6;
  row.estimates = {{"ring", 110.0, true}, {"tree", -1, false}, {"direct", 7.126, false}};
  row.predicted_us = 110.0;
  return row;
}

TEST(Report, TitleSaysTheModeAndSweep) {
  TableInfo info{BenchCollective::kBroadcast, 2, DataType::kF32, std::nullopt, 7, 1, "tree"};
  info.blocking = false;
  std::string header = format_table_header(info);
  EXPECT_EQ(header.substr(0, header.find('\n')),
            "# chorus-bench: broadcast, 2 ranks, float, none, 7 iters, 1 warmup, algo tree, "
            "non-blocking");
  info.blocks = 3;
  header = format_table_header(info);
  EXPECT_EQ(header.substr(0, header.find('\n')),
            "# chorus-bench: broadcast, 2 ranks, float, none, 3 blocks x 7 iters, 1 warmup, algo "
            "tree, non-blocking");
  info.blocks = 1;
  info.sweep_algos = true;
  info.algorithm.clear();
  header = format_table_header(info);
  EXPECT_NE(header.find("algo sweep, non-blocking\n# every algorithm forced in turn, then auto; "
                        "* = the selector's choice for the size\n#\n"),
            std::string::npos)
      << header;
}

TEST(Report, OptionalColumnsOnlyWhenAsked) {
  const TableInfo plain{BenchCollective::kAllReduce, 4, DataType::kF32, ReduceOp::kSum, 20, 5, ""};
  const std::string header = format_table_header(plain);
  EXPECT_EQ(header.find("p50"), std::string::npos);
  EXPECT_EQ(header.find("pred"), std::string::npos);
  // Extra fields in a row do not show without the flags.
  EXPECT_EQ(format_row(row_with_extras(), plain), format_row(sample_row()));
}

TEST(Report, PercentileAndPredictionColumns) {
  const TableInfo info = all_columns();
  const std::string header = format_table_header(info);
  const size_t titles = header.find("#       size");
  ASSERT_NE(titles, std::string::npos);
  const std::string title_line = header.substr(titles, header.find('\n', titles) - titles);
  EXPECT_EQ(title_line,
            "#       size         count      type   redop    root"
            "     time   algbw   busbw  #wrong      p50      p99"
            "     time   algbw   busbw  #wrong      p50      p99     pred  algo");
  const std::string text = format_row(row_with_extras(), info);
  const std::string row = text.substr(0, text.find('\n') + 1);
  EXPECT_EQ(row,
            "     1048576        262144     float     sum      -1"
            "    123.5    8.49   12.74       0    120.3    250.0"
            "    99.50   10.54   15.81       3    98.50    12346    110.0  ring\n");
  // Every column title ends where the row's value ends.
  for (size_t end : {12u, 26u, 36u, 44u, 52u, 61u, 69u, 77u, 85u, 94u, 103u, 112u, 120u, 128u, 136u,
                     145u, 154u, 163u}) {
    EXPECT_NE(title_line[end - 1], ' ') << end;
    EXPECT_NE(row[end - 1], ' ') << end;
    EXPECT_EQ(row[end], ' ') << end;
  }
  // The block titles sit over their blocks.
  const size_t out_title = header.find("out-of-place");
  const size_t in_title = header.find("in-place");
  const size_t line_start = header.rfind('\n', out_title) + 1;
  EXPECT_GT(out_title - line_start, 52u);
  EXPECT_LT(out_title - line_start, 52u + 51u - 12u);
  EXPECT_GT(in_title - line_start, 52u + 51u);
  // Without a sweep, the predictions for every algorithm follow the line.
  EXPECT_EQ(text.substr(row.size()), "#   predicted (us):  ring* 110.0  tree -  direct 7.13\n");
}

TEST(Report, MissingPercentilesAndPredictionsPrintADash) {
  TableInfo info = all_columns();
  Row row = sample_row();
  row.predicted_us = -1;
  const std::string text = format_row(row, info);
  EXPECT_NE(text.find("   15.81       3        -        -        -  ring\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("#   predicted (us):  (no algorithm registered)\n"), std::string::npos);
}

TEST(Report, SweepRowsMarkTheSelectorsChoice) {
  TableInfo info{BenchCollective::kAllReduce, 4, DataType::kF32, ReduceOp::kSum, 20, 5, ""};
  info.sweep_algos = true;
  Row row = sample_row();
  row.forced = "ring";
  row.selected = true;
  EXPECT_TRUE(format_row(row, info).ends_with("  ring *\n"));
  row.selected = false;
  EXPECT_TRUE(format_row(row, info).ends_with("  ring\n"));
  row.forced = "auto";
  row.selected = true;
  EXPECT_TRUE(format_row(row, info).ends_with("  auto (ring)\n"));
  // With --explain a sweep prints the column, not the extra line.
  info.explain = true;
  row.predicted_us = 42;
  row.estimates = {{"ring", 42, true}};
  const std::string text = format_row(row, info);
  EXPECT_EQ(text.find("predicted"), std::string::npos) << text;
  EXPECT_TRUE(text.ends_with("    42.00  auto (ring)\n")) << text;
}

TEST(Report, Percentiles) {
  EXPECT_DOUBLE_EQ(percentile_median({}), 0.0);
  EXPECT_DOUBLE_EQ(percentile_99({}), 0.0);
  EXPECT_DOUBLE_EQ(percentile_median({5}), 5.0);
  EXPECT_DOUBLE_EQ(percentile_99({5}), 5.0);
  EXPECT_DOUBLE_EQ(percentile_median({3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(percentile_median({4, 1, 3, 2}), 2.5);
  // Below 100 samples the 99th percentile is the maximum.
  EXPECT_DOUBLE_EQ(percentile_99({1, 9, 3, 2}), 9.0);
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  EXPECT_DOUBLE_EQ(percentile_99(hundred), 99.0);
  EXPECT_DOUBLE_EQ(percentile_median(hundred), 50.5);
  std::vector<double> thousand;
  for (int i = 1; i <= 1000; ++i) thousand.push_back(i);
  EXPECT_DOUBLE_EQ(percentile_99(thousand), 990.0);
}

TEST(Report, JsonOptionalFields) {
  Options options;
  options.collectives = {BenchCollective::kAllReduce};
  options.blocking = false;
  options.percentiles = true;
  options.sweep_algos = true;
  options.explain = true;
  Row row = row_with_extras();
  row.forced = "tree";
  row.selected = false;
  row.predicted_us = -1;
  const std::string json = format_json(options, 4, {row});
  for (const char* want :
       {"\"blocking\": false", "\"percentiles\": true", "\"sweep_algos\": true",
        "\"explain\": true", "\"timing\": \"async back-to-back",
        "\"p50_us\": 120.300, \"p99_us\": 250.000, \"forced\": \"tree\", \"selected\": false, "
        "\"predicted_us\": null, \"estimates\": [{\"algorithm\": \"ring\", \"predicted_us\": "
        "110.000, \"chosen\": true}, {\"algorithm\": \"tree\", \"predicted_us\": null, "
        "\"chosen\": false}, {\"algorithm\": \"direct\", \"predicted_us\": 7.126, "
        "\"chosen\": false}]}"})
    EXPECT_NE(json.find(want), std::string::npos) << want << "\nin\n" << json;
  // Plain rows carry none of them.
  const std::string plain = format_json(Options{}, 4, {sample_row()});
  for (const char* absent : {"p50_us", "forced", "predicted_us", "estimates"})
    EXPECT_EQ(plain.find(absent), std::string::npos) << absent;
  EXPECT_NE(plain.find("\"blocking\": true"), std::string::npos);
}

TEST(Report, Footer) {
  std::vector<Row> rows = {sample_row()};
  EXPECT_EQ(total_wrong(rows), 3u);
  EXPECT_DOUBLE_EQ(average_busbw(rows),
                   (rows[0].out_of_place.busbw_gbps + rows[0].in_place.busbw_gbps) / 2);
  rows[0].in_place.wrong = 0;
  rows[0].out_of_place.busbw_gbps = 1.0;
  rows[0].in_place.busbw_gbps = 2.0;
  EXPECT_EQ(format_footer(rows),
            "# Out of bounds values : 0 OK\n"
            "# Avg bus bandwidth    : 1.5\n"
            "#\n");
  rows[0].out_of_place.wrong = 2;
  EXPECT_NE(format_footer(rows).find(": 2 FAILED"), std::string::npos);
}

TEST(Report, AverageSkipsUnavailablePlacements) {
  Row row;
  row.out_of_place = make_measurement(BenchCollective::kSendRecv, 2, 1000, 1);
  EXPECT_DOUBLE_EQ(average_busbw({row}), 1.0);
  EXPECT_DOUBLE_EQ(average_busbw({}), 0.0);
}

TEST(Report, Json) {
  Options options;
  options.collectives = {BenchCollective::kAllReduce};
  options.algorithm = "ring";
  Row unchecked = sample_row();
  unchecked.out_of_place.wrong.reset();
  const std::string json = format_json(options, 4, {sample_row(), unchecked});
  for (const char* want :
       {"\"benchmark\": \"chorus-bench\"", "\"collectives\": [\"all_reduce\"]", "\"world_size\": 4",
        "\"dtype\": \"float\"", "\"op\": \"sum\"", "\"iters\": 20", "\"check\": true",
        "\"algorithm\": \"ring\"", "\"out_of_bounds\": 6",
        "{\"collective\": \"all_reduce\", \"size\": 1048576, \"count\": 262144, \"type\": "
        "\"float\", \"redop\": \"sum\", \"root\": -1, \"placement\": \"out-of-place\", "
        "\"time_us\": 123.456, ",
        "\"placement\": \"in-place\"", "\"wrong\": 3", "\"wrong\": null"})
    EXPECT_NE(json.find(want), std::string::npos) << want << "\nin\n" << json;
  // Four (row, placement) objects, balanced brackets.
  size_t objects = 0;
  for (size_t at = json.find("\"placement\""); at != std::string::npos;
       at = json.find("\"placement\"", at + 1))
    ++objects;
  EXPECT_EQ(objects, 4u);
  EXPECT_EQ(std::count(json.begin(), json.end(), '{'), std::count(json.begin(), json.end(), '}'));
  EXPECT_EQ(std::count(json.begin(), json.end(), '['), std::count(json.begin(), json.end(), ']'));
}

TEST(Report, JsonEscapesAndHasNoNan) {
  Options options;
  options.collectives = {BenchCollective::kBroadcast};
  options.algorithm = "we\"ird\\";
  Row row;
  row.collective = BenchCollective::kBroadcast;
  row.out_of_place = make_measurement(row.collective, 1, 8, 0);
  row.out_of_place.time_us = std::numeric_limits<double>::quiet_NaN();
  const std::string json = format_json(options, 1, {row});
  EXPECT_NE(json.find("\"algorithm\": \"we\\\"ird\\\\\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"time_us\": null"), std::string::npos) << json;
  EXPECT_EQ(json.find("nan"), std::string::npos) << json;
}

}  // namespace
}  // namespace chorus::bench
