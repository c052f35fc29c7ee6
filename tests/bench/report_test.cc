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
            "# chorus-bench: all_reduce, 4 ranks, float, sum, 20 iters, 5 warmup, algo auto");
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
