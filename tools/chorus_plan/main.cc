// chorus-plan: memory per device and step time of a GPT at every mesh of a cluster, and the mesh
// to use (usage: chorus-plan --help; docs/PLANNING.md).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "chart.h"
#include "cluster.h"
#include "error.h"
#include "local_probe.h"
#include "options.h"
#include "plan.h"
#include "report.h"

int main(int argc, char** argv) {
  using namespace chorus::plan;
  try {
    const Options o = parse_options(std::vector<std::string>(argv + 1, argv + argc));
    if (o.help) {
      std::fputs(usage().c_str(), stdout);
      return 0;
    }
    Cluster cluster = cluster_preset(o.cluster, o.nodes);
    if (o.per_node > 0) cluster.per_node = o.per_node;
    if (o.cluster == "local") calibrate_local(cluster, o.setup);
    const Plan plan = make_plan(o.setup, cluster, o.mesh);
    const std::string out = o.json ? json_report(plan) : text_report(plan);
    std::fputs(out.c_str(), stdout);
    if (!o.svg.empty()) {
      std::ofstream svg(o.svg);
      svg << svg_chart(plan);
      if (!svg.good()) fail("cannot write --svg " + o.svg);
    }
    return 0;
  } catch (const PlanError& e) {
    std::fprintf(stderr, "chorus-plan: %s\n", e.message.c_str());
    return 2;
  }
}
