// chorus-train --show-schedule (show_schedule.h).
#include "show_schedule.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "chorus/parallel/pipeline.h"

namespace chorus::train {

int show_schedule(const Options& o, const Mesh& mesh) {
  const parallel::PipelineSchedule s =
      parallel::make_schedule(o.schedule, mesh.pp, mesh.chunks, mesh.micro_batches);
  const parallel::PipelineSimulation sim = parallel::validate(s);
  std::printf("%s schedule: %d stages%s, %d micro-batches (a backward costs two forwards)\n",
              o.schedule.c_str(), mesh.pp,
              mesh.chunks > 1 ? (" x " + std::to_string(mesh.chunks) + " chunks").c_str() : "",
              mesh.micro_batches);
  std::fputs(parallel::timeline_text(s, sim).c_str(), stdout);
  std::printf("bubble %.1f%% (the formula: %.1f%%); peak live activations per stage:",
              100 * sim.bubble, 100 * parallel::predicted_bubble(s));
  for (int a : sim.peak_activations) std::printf(" %d", a);
  std::printf("\n");
  if (!o.schedule_svg.empty()) {
    std::ofstream out(o.schedule_svg, std::ios::trunc);
    out << parallel::timeline_svg(s, sim);
    out.flush();
    if (!out) {
      std::fprintf(stderr, "chorus-train: cannot write %s\n", o.schedule_svg.c_str());
      return 1;
    }
    std::printf("drawn in %s\n", o.schedule_svg.c_str());
  }
  return 0;
}

}  // namespace chorus::train
