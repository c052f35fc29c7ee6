// chorus::parallel — a timeline of every rank's training steps, as Chrome trace-event JSON
// (Perfetto, chrome://tracing, or tools/trace_png.py for a picture).
//
//   parallel::Tracer trace(world);
//   trace.instrument(model);                      // forward and backward of every block
//   { auto s = trace.span("step 3"); ... }        // anything else, nested freely
//   trace.collect(mesh.dp(), "dp");               // the collectives since the last call
//   trace.write("trace.json");                    // collective: rank 0 writes every rank's
//
// One process per rank ("pid" = world rank); one track ("tid") per kind of activity: "compute"
// (steps, forwards, backwards, blocks, optimizer), "pipeline" (waits for a stage's inputs: the
// bubble) and one per communicator ("comm dp", "comm tp", ...), whose events come from that
// communicator's flight recorder: every collective with its size, dtype, algorithm, the time it
// was queued before it started and the time it ran (which includes waiting for its peers). Times
// are microseconds of the wall clock (CLOCK_REALTIME, what the flight recorder uses), from the
// earliest event of the job. Events on one track nest (tools/check_trace.py checks it).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/tensor/nn.h"

namespace chorus::parallel {

class Tracer {
 public:
  explicit Tracer(Communicator& world);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Microseconds of the wall clock now.
  static double now_us();

  // A complete event. `args` is a JSON object's members ("\"micro\": 3") or empty.
  void add(const std::string& name, const std::string& track, double start_us, double end_us,
           const std::string& args = {});
  // An event from now until the returned scope ends.
  class Span {
   public:
    ~Span();
    Span(Span&& other) noexcept;
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;
    Span& operator=(Span&&) = delete;

   private:
    friend class Tracer;
    Span(Tracer* t, std::string name, std::string track, std::string args);
    Tracer* tracer_;
    std::string name_, track_, args_;
    double start_;
  };
  [[nodiscard]] Span span(std::string name, std::string track = "compute", std::string args = {});

  // Forward and backward spans of every block of `model` ("forward h.3", "backward h.3"), on
  // "compute", from forward hooks and from identity ops whose backward marks where the gradient
  // reaches each block. Until the tracer is destroyed.
  void instrument(tensor::nn::GPT& model);
  // The collectives `comm` issued since the last call, on track "comm <label>" (a larger
  // CHORUS_FR_ENTRIES keeps more between calls; gaps are reported as "unrecorded").
  void collect(Communicator& comm, const std::string& label);
  // Marks everything `comm` recorded so far as seen, without events (set-up before the first step).
  void skip(Communicator& comm, const std::string& label);
  // Collective over the world: rank 0 writes every rank's events to `path`.
  void write(const std::string& path);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace chorus::parallel
